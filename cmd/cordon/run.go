package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// Exit statuses of `cordon run` that are not the command's own.
const (
	exitTimeout = 124 // the command ran past --timeout (as timeout(1))
	exitCordon  = 125 // cordon itself failed (as docker run)
)

type envFlag map[string]string

func (e envFlag) String() string { return "" }
func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		// K alone takes the value from cordon's own environment.
		v, ok = os.LookupEnv(k)
		if !ok {
			return fmt.Errorf("%s is not set in this environment", k)
		}
	}
	e[k] = v
	return nil
}

func runCmd(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cordon run [flags] -- COMMAND [ARG...]\n\nRuns COMMAND in a fresh sandbox, streams its output, and exits with its\nexit status (128+N if it died of signal N, %d on timeout, %d if cordon\nitself failed). Ctrl-C stops the command, waits for the stop to be\nconfirmed and tears the sandbox down.\n\nflags:\n", exitTimeout, exitCordon)
		fs.PrintDefaults()
	}
	tier := fs.String("tier", defaultTier, "isolation tier")
	env := envFlag{}
	fs.Var(env, "env", "set an environment variable `K=V` (or K, taken from here); repeatable")
	timeout := fs.Duration("timeout", 0, "stop the command after this long (0: the agent's default, 5m)")
	workspace := fs.String("workspace", "", "host `DIR` to use as the workspace (default: a fresh one, removed afterwards)")
	interactive := fs.Bool("i", false, "pass cordon's standard input to the command")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fs.Usage()
		return 2
	}
	spec := sandbox.Spec{Tier: *tier, Env: env, Workspace: *workspace}
	if *timeout > 0 {
		spec.MaxTimeout = *timeout
	}
	opts := sandbox.ExecOptions{Args: argv[1:], Timeout: *timeout, Stdout: os.Stdout, Stderr: os.Stderr}
	if *interactive {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 4<<20))
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: reading stdin: %v\n", err)
			return exitCordon
		}
		s := string(b)
		opts.Stdin = &s
	}
	return runIn(spec, argv[0], opts)
}

func runIn(spec sandbox.Spec, command string, opts sandbox.ExecOptions) int {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var caught os.Signal
	go func() {
		caught = <-sigs
		fmt.Fprintln(os.Stderr, "cordon: stopping the command…")
		stop()
	}()

	sb, err := newProvider().Create(ctx, spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return exitCordon
	}
	res, execErr := sb.Exec(ctx, command, opts)
	destroyCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Destroy(destroyCtx); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: teardown: %v\n", err)
		return exitCordon
	}
	switch {
	case errors.Is(execErr, context.Canceled) && caught != nil:
		return 128 + int(caught.(syscall.Signal))
	case execErr != nil:
		fmt.Fprintf(os.Stderr, "cordon: %v\n", execErr)
		return exitCordon
	case res.TimedOut:
		fmt.Fprintf(os.Stderr, "cordon: the command timed out after %s and was stopped\n", opts.Timeout)
		return exitTimeout
	case res.Signal != "":
		fmt.Fprintf(os.Stderr, "cordon: the command was killed by %s\n", res.Signal)
		return 128 + int(unix.SignalNum(res.Signal))
	}
	return res.ExitCode
}
