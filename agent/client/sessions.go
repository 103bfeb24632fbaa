package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// Sessions (feature "sessions"): programs of the sandbox's own, detached
// from any connection; see wire.RouteSessions.

func (c *Client) sessionCall(ctx context.Context, method, route string, body, out any) error {
	resp, err := c.do(ctx, method, route, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		if resp.StatusCode/100 != 2 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
			return errorFrom(resp.StatusCode, b)
		}
		return nil
	}
	return decode(resp, out)
}

func sessionRoute(id, verb string) string {
	r := wire.RouteSessions + "/" + url.PathEscape(id)
	if verb != "" {
		r += "/" + verb
	}
	return r
}

// StartSession starts a detached program.
func (c *Client) StartSession(ctx context.Context, req wire.SessionRequest) (*wire.Session, error) {
	var s wire.Session
	if err := c.sessionCall(ctx, http.MethodPost, wire.RouteSessions, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Sessions lists the sandbox's sessions, oldest first.
func (c *Client) Sessions(ctx context.Context) ([]wire.Session, error) {
	var l wire.SessionList
	if err := c.sessionCall(ctx, http.MethodGet, wire.RouteSessions, nil, &l); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// Session describes one session.
func (c *Client) Session(ctx context.Context, id string) (*wire.Session, error) {
	var s wire.Session
	if err := c.sessionCall(ctx, http.MethodGet, sessionRoute(id, ""), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// KillSession signals a session's process group and returns once the agent
// has confirmed it gone (KILL after grace; 0 is the agent's default).
func (c *Client) KillSession(ctx context.Context, id, signal string, grace time.Duration) (*wire.Session, error) {
	var s wire.Session
	if err := c.sessionCall(ctx, http.MethodPost, sessionRoute(id, "kill"), wire.KillRequest{Signal: signal, GraceMs: grace.Milliseconds()}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// WaitSession returns the session once it has exited, or after timeout
// (its State then says running).
func (c *Client) WaitSession(ctx context.Context, id string, timeout time.Duration) (*wire.Session, error) {
	var s wire.Session
	route := sessionRoute(id, "wait") + "?timeoutMs=" + strconv.FormatInt(timeout.Milliseconds(), 10)
	if err := c.sessionCall(ctx, http.MethodGet, route, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ForgetSession removes an exited session's record.
func (c *Client) ForgetSession(ctx context.Context, id string) error {
	return c.sessionCall(ctx, http.MethodDelete, sessionRoute(id, ""), nil, nil)
}

// EvictedError is a read of output that is no longer held: First is the
// first offset still held, where to resume.
type EvictedError struct{ First int64 }

func (e *EvictedError) Error() string {
	return fmt.Sprintf("the session's output before offset %d is no longer held", e.First)
}

// SessionOutput reads a session's output from offset from, calling fn with
// each stream's bytes and their offset in order; with follow it goes on
// live until the output ends. It returns the offset it reached and whether
// the output has ended there. A from that is no longer held is an
// *EvictedError; so is output evicted while a follower lagged.
func (c *Client) SessionOutput(ctx context.Context, id string, from int64, follow bool, fn func(stream string, offset int64, data []byte) error) (next int64, done bool, err error) {
	next, done, _, err = c.readOutput(ctx, sessionRoute(id, "output"), from, follow, fn, func() (int64, error) {
		first, _, err := c.sessionFirst(ctx, id)
		return first, err
	})
	return next, done, err
}

// ExecutionOutput reads a retained execution's output as SessionOutput
// reads a session's (feature "retained-output"), from any connection; once
// the output has ended, result is how the command ended.
func (c *Client) ExecutionOutput(ctx context.Context, id string, from int64, follow bool, fn func(stream string, offset int64, data []byte) error) (next int64, result *wire.Result, err error) {
	next, _, result, err = c.readOutput(ctx, wire.RouteExecutions+url.PathEscape(id)+"/output", from, follow, fn, func() (int64, error) {
		return 0, errors.New("the execution's output was evicted while it was followed; read again from offset 0 to learn where it resumes")
	})
	return next, result, err
}

// readOutput reads an NDJSON output stream of route (a session's or an
// execution's) from offset from; first says where a lagging follower
// resumes.
func (c *Client) readOutput(ctx context.Context, route string, from int64, follow bool, fn func(stream string, offset int64, data []byte) error, first func() (int64, error)) (next int64, done bool, result *wire.Result, err error) {
	route += "?from=" + strconv.FormatInt(from, 10)
	if follow {
		route += "&follow=1"
	}
	resp, err := c.do(ctx, http.MethodGet, route, nil)
	if err != nil {
		return from, false, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		var ev wire.OutputEvicted
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		if json.Unmarshal(b, &ev) == nil {
			return from, false, nil, &EvictedError{First: ev.First}
		}
		return from, false, nil, errorFrom(resp.StatusCode, b)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return from, false, nil, errorFrom(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 2<<20)
	next = from
	for sc.Scan() {
		var ev wire.SessionEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return next, false, nil, fmt.Errorf("agent sent a malformed output event: %w", err)
		}
		switch ev.Type {
		case wire.SessionOutput:
			data, err := base64.StdEncoding.DecodeString(ev.Data)
			if err != nil || ev.Offset != next {
				return next, false, nil, fmt.Errorf("agent sent output at %d, want %d", ev.Offset, next)
			}
			if err := fn(ev.Stream, ev.Offset, data); err != nil {
				return next, false, nil, err
			}
			next += int64(len(data))
		case wire.SessionEnd:
			if follow && !ev.Done {
				// Evicted while this reader lagged.
				f, ferr := first()
				if ferr != nil {
					return next, false, nil, ferr
				}
				return next, false, nil, &EvictedError{First: f}
			}
			return next, ev.Done, ev.Result, nil
		}
	}
	if err := sc.Err(); err != nil {
		return next, false, nil, err
	}
	if ctx.Err() != nil {
		return next, false, nil, ctx.Err()
	}
	return next, false, nil, errors.New("the agent ended the output stream early")
}

func (c *Client) sessionFirst(ctx context.Context, id string) (int64, int64, error) {
	s, err := c.Session(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	return s.OutputFirst, s.OutputNext, nil
}

// SessionInput types data into a terminal session (feature "terminals"),
// or writes it to a Stdin session's standard input ("session-stdin").
func (c *Client) SessionInput(ctx context.Context, id string, data []byte) error {
	return c.sessionInput(ctx, id, data, "")
}

// CloseSessionStdin writes data (may be empty) to a Stdin session's
// standard input and closes it (feature "session-stdin").
func (c *Client) CloseSessionStdin(ctx context.Context, id string, data []byte) error {
	return c.sessionInput(ctx, id, data, "?end=1")
}

func (c *Client) sessionInput(ctx context.Context, id string, data []byte, query string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+sessionRoute(id, "input")+query, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(data))
	c.auth(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decode(resp, &wire.StdioWriteResponse{})
}

// ResizeSession sets a terminal session's size.
func (c *Client) ResizeSession(ctx context.Context, id string, rows, cols uint16) error {
	return c.sessionCall(ctx, http.MethodPost, sessionRoute(id, "resize"), wire.ResizeRequest{Rows: rows, Cols: cols}, nil)
}

// Quiesce stops everything the agent runs, orphans included, and returns
// once nothing is left (feature "quiesce"); the agent serves on.
func (c *Client) Quiesce(ctx context.Context, grace time.Duration) (*wire.QuiesceResponse, error) {
	var r wire.QuiesceResponse
	if err := c.sessionCall(ctx, http.MethodPost, wire.RouteQuiesce, wire.QuiesceRequest{GraceMs: grace.Milliseconds()}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Flush syncs the sandbox's writable file systems (feature "flush"); an
// error with code flush_unconfirmed means it did not finish in time.
func (c *Client) Flush(ctx context.Context, timeout time.Duration) (*wire.FlushResponse, error) {
	var r wire.FlushResponse
	if err := c.sessionCall(ctx, http.MethodPost, wire.RouteFlush, wire.FlushRequest{TimeoutMs: timeout.Milliseconds()}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
