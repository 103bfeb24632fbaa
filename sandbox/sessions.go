package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// Session is a program of the sandbox's own, detached from any caller
// (wire.Session); SessionRequest starts one.
type (
	Session        = wire.Session
	SessionRequest = wire.SessionRequest
)

// EvictedError is a read of session output that is no longer held: read
// again from First.
type EvictedError = client.EvictedError

func (s *Sandbox) sessions() error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.hasFeature("sessions") {
		return fmt.Errorf("%w: sessions (this agent has none)", ErrUnsupported)
	}
	return nil
}

// Start starts a detached program, which runs until it exits or is killed,
// whoever is connected; its output is retained (SessionRequest.RetainBytes)
// for Attach.
func (s *Sandbox) Start(ctx context.Context, req SessionRequest) (*Session, error) {
	if err := s.sessions(); err != nil {
		return nil, err
	}
	return s.agent().StartSession(ctx, req)
}

// Sessions lists the sandbox's sessions, oldest first.
func (s *Sandbox) Sessions(ctx context.Context) ([]Session, error) {
	if err := s.sessions(); err != nil {
		return nil, err
	}
	return s.agent().Sessions(ctx)
}

// Attach copies a session's output from byte offset from to stdout and
// stderr (either may be nil), then, with follow, what comes until it ends.
// It returns the offset reached and whether the output ended there; an
// offset no longer held is an *EvictedError naming where to resume.
func (s *Sandbox) Attach(ctx context.Context, id string, from int64, follow bool, stdout, stderr io.Writer) (next int64, done bool, err error) {
	if err := s.sessions(); err != nil {
		return from, false, err
	}
	return s.agent().SessionOutput(ctx, id, from, follow, toWriters(stdout, stderr))
}

// Kill signals a session's process group (TERM when signal is empty), KILL
// after grace (0: the agent's default, 5 s), and returns once it is gone.
func (s *Sandbox) Kill(ctx context.Context, id, signal string, grace time.Duration) (*Session, error) {
	if err := s.sessions(); err != nil {
		return nil, err
	}
	return s.agent().KillSession(ctx, id, signal, grace)
}

// Wait returns the session once it has exited, or after timeout (its State
// then says running).
func (s *Sandbox) Wait(ctx context.Context, id string, timeout time.Duration) (*Session, error) {
	if err := s.sessions(); err != nil {
		return nil, err
	}
	return s.agent().WaitSession(ctx, id, timeout)
}

// Terminal starts req on a terminal of its own (feature "terminals"): type
// into it with Input, size it with Resize, read it with Attach (all of its
// output is on stdout).
func (s *Sandbox) Terminal(ctx context.Context, req SessionRequest) (*Session, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	if !s.hasFeature("terminals") {
		return nil, fmt.Errorf("%w: terminals (this agent has none)", ErrUnsupported)
	}
	req.TTY = true
	return s.agent().StartSession(ctx, req)
}

// Input types data into a terminal session: "\x03" is Ctrl-C.
func (s *Sandbox) Input(ctx context.Context, id string, data []byte) error {
	if err := s.sessions(); err != nil {
		return err
	}
	return s.agent().SessionInput(ctx, id, data)
}

// Resize sets a terminal session's size; its program gets SIGWINCH.
func (s *Sandbox) Resize(ctx context.Context, id string, rows, cols uint16) error {
	if err := s.sessions(); err != nil {
		return err
	}
	return s.agent().ResizeSession(ctx, id, rows, cols)
}

// Quiesce stops everything the sandbox runs (commands in flight, sessions,
// orphans that left every group), in rounds of TERM, grace and KILL, and
// returns once nothing is left; the sandbox serves on.
func (s *Sandbox) Quiesce(ctx context.Context, grace time.Duration) error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.hasFeature("quiesce") {
		return fmt.Errorf("%w: quiesce (this agent has none)", ErrUnsupported)
	}
	_, err := s.agent().Quiesce(ctx, grace)
	return err
}

// Flush syncs the sandbox's writable file systems; an error says it was
// not confirmed within timeout.
func (s *Sandbox) Flush(ctx context.Context, timeout time.Duration) error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.hasFeature("flush") {
		return fmt.Errorf("%w: flush (this agent has none)", ErrUnsupported)
	}
	_, err := s.agent().Flush(ctx, timeout)
	return err
}

// WatchEvent is one change under a watched directory.
type WatchEvent = wire.WatchEvent

// Watch streams the changes under a directory inside the sandbox to fn
// (the first event is "ready", once every later change will be seen) until
// ctx ends, fn fails or the directory is removed.
func (s *Sandbox) Watch(ctx context.Context, path string, recursive bool, fn func(WatchEvent) error) error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.hasFeature("watch") {
		return fmt.Errorf("%w: watch (this agent has none)", ErrUnsupported)
	}
	return s.agent().Watch(ctx, path, recursive, fn)
}

// ExecutionOutput reads back the output of a command run with
// ExecOptions.RetainOutput, by its execution id, from any offset still
// held, following it live with follow; once it has ended, result is how
// the command ended.
func (s *Sandbox) ExecutionOutput(ctx context.Context, id string, from int64, follow bool, stdout, stderr io.Writer) (next int64, result *wire.Result, err error) {
	if err := s.live(); err != nil {
		return from, nil, err
	}
	if !s.hasFeature("retained-output") {
		return from, nil, fmt.Errorf("%w: retained output (this agent keeps none)", ErrUnsupported)
	}
	return s.agent().ExecutionOutput(ctx, id, from, follow, toWriters(stdout, stderr))
}

// DialTCP opens a byte stream to port on the sandbox's own loopback (a dev
// server, a kernel): the sandbox needs no network interface for it.
// CloseWrite on the connection half-closes it.
func (s *Sandbox) DialTCP(ctx context.Context, port int) (net.Conn, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	if !s.hasFeature("tcp-connect") {
		return nil, fmt.Errorf("%w: tcp-connect (this agent has none)", ErrUnsupported)
	}
	return s.agent().DialTCP(ctx, port)
}

// toWriters sends each stream's bytes to its writer (nil discards).
func toWriters(stdout, stderr io.Writer) func(stream string, _ int64, data []byte) error {
	return func(stream string, _ int64, data []byte) error {
		w := stdout
		if stream == "stderr" {
			w = stderr
		}
		if w == nil {
			return nil
		}
		_, err := w.Write(data)
		return err
	}
}
