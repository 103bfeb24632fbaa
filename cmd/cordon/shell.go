package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// shellCommand is what cordon shell starts: bash where the sandbox has it,
// else sh.
var shellCommand = []string{"/bin/sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash || exec sh"}

func shellCmd(args []string) int {
	fs := newFlagSet("shell", "usage: cordon shell [flags] ID [-- COMMAND [ARG...]]\n\nOpens an interactive terminal in a sandbox on the daemon (bash, else sh,\nunless COMMAND is given): cordon's terminal in raw mode, its size passed\non as it changes, and cordon exits with the program's status. Ctrl-C goes\nto the program.")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) < 1 {
		fs.Usage()
		return 2
	}
	argv := shellCommand
	if len(rest) > 1 {
		argv = rest[1:]
		if argv[0] == "--" {
			argv = argv[1:]
		}
	}
	if len(argv) == 0 {
		fs.Usage()
		return 2
	}
	return terminal(c.Agent(rest[0]), wire.SessionRequest{Command: argv[0], Args: argv[1:]})
}

// terminal runs req as a terminal session through ac and attaches cordon's
// terminal to it until the program exits; it returns the program's status.
// The session is forgotten at the end. A session with a timeout is the
// agent's to end; should it not have ended HostGrace after, cordon kills
// it itself and says so.
func terminal(ac *client.Client, req wire.SessionRequest) int {
	ctx := context.Background()
	if req.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond+sandbox.HostGrace)
		defer cancel()
	}
	fd := int(os.Stdin.Fd())
	req.TTY = true
	if ws, err := termSize(fd); err == nil {
		req.Rows, req.Cols = ws.Row, ws.Col
	}
	if t := os.Getenv("TERM"); t != "" {
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		if _, ok := req.Env["TERM"]; !ok {
			req.Env["TERM"] = t
		}
	}
	s, err := ac.StartSession(ctx, req)
	if err != nil {
		return apiFail(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = ac.ForgetSession(cctx, s.ID)
	}()
	code := attachTerminal(ctx, ac, s.ID, 0)
	if ctx.Err() != nil {
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if end, err := ac.Session(kctx, s.ID); err == nil && end.State == wire.SessionExited {
			return sessionStatus(end) // it ended just as cordon stopped waiting
		}
		_, kerr := ac.KillSession(kctx, s.ID, "KILL", 0)
		fmt.Fprintf(os.Stderr, "cordon: the session ran past its timeout (%v) and the sandbox's agent did not end it within %v more", time.Duration(req.TimeoutMs)*time.Millisecond, sandbox.HostGrace)
		if kerr != nil {
			fmt.Fprintf(os.Stderr, "; killing it failed too: %v\n", kerr)
		} else {
			fmt.Fprintln(os.Stderr, "; cordon killed it")
		}
		return exitTimeout
	}
	return code
}

// attachTerminal attaches cordon's terminal to terminal session id, from
// output offset from: raw mode, keystrokes typed in, the size passed on
// and followed, the output to stdout; it returns the session's status once
// its output has ended, or ctx's end (its caller's to report).
func attachTerminal(ctx context.Context, ac *client.Client, id string, from int64) int {
	fd := int(os.Stdin.Fd())
	s := &wire.Session{ID: id}
	if ws, err := termSize(fd); err == nil {
		_ = ac.ResizeSession(ctx, s.ID, ws.Row, ws.Col)
	}
	restore, err := makeRaw(fd)
	if err == nil {
		defer restore()
	}
	// The size follows cordon's terminal.
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			if ws, err := termSize(fd); err == nil {
				_ = ac.ResizeSession(ctx, s.ID, ws.Row, ws.Col)
			}
		}
	}()
	// Keystrokes as they come; the program's end ends the copy.
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := os.Stdin.Read(buf)
			if n > 0 {
				if ac.SessionInput(ctx, s.ID, buf[:n]) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	if _, _, err := ac.SessionOutput(ctx, s.ID, from, true, func(_ string, _ int64, data []byte) error {
		_, err := os.Stdout.Write(data)
		return err
	}); err != nil {
		if restore != nil {
			restore()
		}
		if ctx.Err() != nil {
			return exitTimeout
		}
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return exitCordon
	}
	end, err := ac.WaitSession(ctx, s.ID, 0)
	for err == nil && end.State != wire.SessionExited {
		// Its output ended before it did (it closed the terminal): wait.
		end, err = ac.WaitSession(ctx, s.ID, 30*time.Second)
	}
	if ctx.Err() != nil {
		return exitTimeout
	}
	if err != nil {
		return apiFail(err)
	}
	return sessionStatus(end)
}
