package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/printable"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

func execCmd(args []string) int {
	fs := newFlagSet("exec", "usage: cordon exec [flags] ID -- COMMAND [ARG...]\n\nRuns COMMAND in a sandbox on the daemon and exits with its status, as cordon\nrun does. Ctrl-C cancels the command and waits for the stop.")
	env := envFlag{}
	fs.Var(env, "env", "set an environment variable `K=V`; repeatable")
	timeout := timeoutFlag(fs, "stop the command after this long (0: the agent's default; with -d or -t, none)")
	cwd := fs.String("cwd", "", "working directory inside")
	interactive := fs.Bool("i", false, "pass cordon's standard input to the command")
	output := outputFormat(fs, "output format: json (the command's output and result as one object, once it ends)")
	maxOutput := maxOutputFlag(fs)
	tty := fs.Bool("t", false, "run the command on a terminal, cordon's own in raw mode (with -i: cordon exec -it ID -- bash)")
	detach := fs.Bool("d", false, "start the command detached, as a session of the sandbox's own that outlives this call; print its id (cordon attach, sessions, kill)")
	name := fs.String("name", "", "with -d: the session's `ID` (default: the agent picks one)")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) > 1 && rest[1] == "--" {
		rest = append(rest[:1], rest[2:]...)
	}
	if len(rest) < 2 {
		fs.Usage()
		return 2
	}
	id, argv := rest[0], rest[1:]
	if *tty && *detach {
		// A terminal of its own that outlives this call: cordon attach
		// types into it later.
		s, err := c.Agent(id).StartSession(context.Background(), wire.SessionRequest{ID: *name, Command: argv[0], Args: argv[1:], Cwd: *cwd, Env: env, TTY: true, TimeoutMs: timeoutMs(*timeout)})
		if err != nil {
			return apiFail(err)
		}
		fmt.Println(printable.String(s.ID))
		return 0
	}
	if *tty {
		if *output != "" {
			fmt.Fprintln(os.Stderr, "cordon: -t takes no -o")
			return 2
		}
		return terminal(c.Agent(id), wire.SessionRequest{Command: argv[0], Args: argv[1:], Cwd: *cwd, Env: env, TimeoutMs: timeoutMs(*timeout)})
	}
	if *detach {
		if *interactive || *output != "" {
			fmt.Fprintln(os.Stderr, "cordon: -d takes neither -i nor -o (a session's output is read with cordon attach)")
			return 2
		}
		s, err := c.Agent(id).StartSession(context.Background(), wire.SessionRequest{ID: *name, Command: argv[0], Args: argv[1:], Cwd: *cwd, Env: env, TimeoutMs: timeoutMs(*timeout)})
		if err != nil {
			return apiFail(err)
		}
		fmt.Println(printable.String(s.ID))
		return 0
	}
	opts := sclient.ExecOptions{Args: argv[1:], Cwd: *cwd, Env: env, Timeout: *timeout, Stdout: os.Stdout, Stderr: os.Stderr, RawOutput: true,
		MaxOutputBytes: maxOutput()}
	if *interactive {
		opts.StdinStream = os.Stdin
	}
	if *output == "json" {
		return execJSON(c, id, argv[0], opts)
	}
	return execRemote(c, id, argv[0], opts, 0)
}

// execJSON runs the command and prints its output and result as one JSON
// object (cordon exec -o json); its status is 0 once the command ran,
// whatever the command's own.
func execJSON(c *sclient.Client, id, command string, opts sclient.ExecOptions) int {
	var stdout, stderr bytes.Buffer
	opts.Stdout, opts.Stderr = &stdout, &stderr
	res, err := c.Exec(context.Background(), id, command, opts)
	if err != nil {
		if code := spawnExit(err); code != exitCordon {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return code
		}
		return apiFail(err)
	}
	return printJSON(struct {
		*wire.Result
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
	}{res, stdout.String(), stderr.String()})
}

// execRemote runs a command in the daemon's sandbox id and returns cordon's
// exit status for it. Ctrl-C cancels the command through the agent and
// waits for the stop.
func execRemote(c *sclient.Client, id, command string, opts sclient.ExecOptions, memory int64) int {
	execID := make(chan string, 1)
	opts.Started = func(id string) { execID <- id }
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	in := onInterrupt(stop, func() {
		select {
		case eid := <-execID:
			// The command stops through the cancel route; dropping the
			// stream alone would leave it running.
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = c.Cancel(cctx, id, eid)
			cancel()
		default:
		}
	})
	opts.Stdout, opts.Stderr = in.Writer(opts.Stdout), in.Writer(opts.Stderr)
	res, err := c.Exec(ctx, id, command, opts)
	switch {
	case err != nil && in.Caught() != nil:
		return 128 + int(in.Caught().(syscall.Signal))
	case err != nil:
		if code := spawnExit(err); code != exitCordon {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return code
		}
		return apiFail(err)
	}
	return exitFor(res, opts.Timeout, memory)
}

// timeoutMs is a session's timeoutMs for --timeout: none for 0, and part
// of a millisecond a whole one (the agent refuses what is out of range).
func timeoutMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1).Milliseconds()
}
