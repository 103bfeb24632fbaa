package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/printable"
)

// The session verbs: programs started detached (cordon exec -d), which
// belong to the sandbox rather than to the call that started them.

func sessionsCmd(args []string) int {
	fs := newFlagSet("sessions", "usage: cordon sessions [flags] ID\n\nLists the sessions of a sandbox on the daemon: programs started with\ncordon exec -d, running or exited, with their retained output's range.")
	output := outputFormat(fs, "output format: json")
	c, rest, code := daemonClientArgs(fs, args, 1)
	if c == nil {
		return code
	}
	list, err := c.Agent(rest[0]).Sessions(context.Background())
	if err != nil {
		return apiFail(err)
	}
	if *output == "json" {
		return printJSON(list)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tPID\tSTATE\tSTARTED\tOUTPUT\tCOMMAND")
	for _, s := range list {
		state := s.State
		if s.ExitCode != nil {
			state = "exited " + strconv.Itoa(*s.ExitCode)
			if s.Signal != "" {
				state = "killed " + s.Signal
			}
			if s.TimedOut {
				state = "timed out"
			}
		}
		started := time.UnixMilli(s.StartedAt).Format(time.TimeOnly)
		// All of it is the agent's word, which the sandbox may have forged.
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d-%d\t%s\n", printable.String(s.ID), s.Pid, printable.String(state), started, s.OutputFirst, s.OutputNext, printable.String(s.Command))
	}
	tw.Flush()
	return 0
}

func attachCmd(args []string) int {
	fs := newFlagSet("attach", "usage: cordon attach [flags] ID SESSION\n\nCopies a session's output, stdout and stderr as it wrote them, from byte\noffset --from (0: the first still held), then follows it live until the\nsession's output ends, and exits with the session's status. Ctrl-C leaves\nthe session running.")
	from := fs.Int64("from", 0, "the byte `OFFSET` to read from")
	noFollow := fs.Bool("no-follow", false, "print what is held and return")
	c, rest, code := daemonClientArgs(fs, args, 2)
	if c == nil {
		return code
	}
	ac := c.Agent(rest[0])
	ctx := context.Background()
	// A terminal session, attached from a terminal, is typed into too.
	if !*noFollow && isTerminal(os.Stdin) {
		if s, err := ac.Session(ctx, rest[1]); err == nil && s.TTY && s.State == wire.SessionRunning {
			return attachTerminal(context.Background(), ac, rest[1], *from)
		}
	}
	next, done, err := ac.SessionOutput(ctx, rest[1], *from, !*noFollow, sessionWriter)
	var ev *client.EvictedError
	if errors.As(err, &ev) && *from == 0 {
		// From the start: whatever is still held.
		fmt.Fprintf(os.Stderr, "cordon: the output before byte %d is no longer held\n", ev.First)
		next, done, err = ac.SessionOutput(ctx, rest[1], ev.First, !*noFollow, sessionWriter)
	}
	if err != nil {
		return apiFail(err)
	}
	if !done {
		fmt.Fprintf(os.Stderr, "cordon: read to byte %d; the session runs on\n", next)
		return 0
	}
	s, err := ac.WaitSession(ctx, rest[1], 0)
	if err != nil {
		return apiFail(err)
	}
	return sessionStatus(s)
}

func sessionWriter(stream string, _ int64, data []byte) error {
	w := os.Stdout
	if stream == "stderr" {
		w = os.Stderr
	}
	_, err := w.Write(data)
	return err
}

// sessionStatus is cordon's exit status for an exited session: its own,
// or 128 and the signal's number, as a shell reports one.
func sessionStatus(s *wire.Session) int {
	if s.State != wire.SessionExited || s.ExitCode == nil {
		return 0
	}
	if s.TimedOut {
		fmt.Fprintf(os.Stderr, "cordon: the session timed out after %s and was stopped\n", time.Duration(s.TimeoutMs)*time.Millisecond)
		return exitTimeout
	}
	if s.Signal != "" {
		if sig, ok := signalNumbers[s.Signal]; ok {
			return 128 + sig
		}
		return exitCordon
	}
	return *s.ExitCode
}

var signalNumbers = map[string]int{"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGKILL": 9, "SIGUSR1": 10, "SIGUSR2": 12, "SIGPIPE": 13, "SIGTERM": 15}

func killCmd(args []string) int {
	fs := newFlagSet("kill", "usage: cordon kill [flags] ID SESSION\n\nSignals a session's process group (TERM by default), KILL after the grace,\nand returns once every process of it is gone.")
	signal := fs.String("signal", "TERM", "the signal: TERM, KILL, INT, HUP, QUIT, USR1, USR2")
	grace := duration(fs, "grace", 0, "how long before KILL (0: the agent's default, 5s)")
	c, rest, code := daemonClientArgs(fs, args, 2)
	if c == nil {
		return code
	}
	s, err := c.Agent(rest[0]).KillSession(context.Background(), rest[1], *signal, *grace)
	if err != nil {
		return apiFail(err)
	}
	fmt.Println(printable.String(fmt.Sprintf("%s %s", s.ID, map[bool]string{true: "killed " + s.Signal, false: "exited"}[s.Signal != ""])))
	return 0
}
