package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// defaultTier is the tier `cordon run` uses when --tier is not given.
const defaultTier = process.Name

// stateDir is where the tiers keep their host-side state: CORDON_STATE_DIR,
// or each tier's default (under /run/cordon as root).
func stateDir() string { return os.Getenv("CORDON_STATE_DIR") }

// Exit statuses of `cordon run` that are not the command's own.
const (
	exitTimeout = 124 // the command ran past --timeout (as timeout(1))
	exitCordon  = 125 // cordon itself failed (as docker run)
	exitOOM     = 137 // the sandbox ran out of memory (as docker and Kubernetes report it)
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
		fmt.Fprintf(fs.Output(), "usage: cordon run [flags] -- COMMAND [ARG...]\n\nRuns COMMAND in a fresh sandbox, streams its output, and exits with its\nexit status (128+N if it died of signal N, %d on timeout, %d out of memory,\n%d if cordon itself failed). Ctrl-C stops the command, waits for the stop\nto be confirmed and tears the sandbox down.\n\nNetwork: by default the sandbox reaches nothing (deny-all). Its commands\nsee HTTP_PROXY/HTTPS_PROXY pointing at cordon's egress proxy, which admits\nexactly the hosts and ports --allow or --egress-profile name and answers\n403 with the reason otherwise; a program that ignores the proxy variables\nhas no route at all.\n\nflags:\n", exitTimeout, exitOOM, exitCordon)
		printDefaults(fs)
	}
	sf := addSpecFlags(fs, true)
	timeout := timeoutFlag(fs, "stop the command after this long (0: the agent's default, 5m; with -t, none)")
	workspace := fs.String("workspace", "", "host `DIR` to use as the workspace (default: a fresh one, removed afterwards)")
	interactive := fs.Bool("i", false, "pass cordon's standard input to the command")
	tty := fs.Bool("t", false, "run the command on a terminal, cordon's own in raw mode (cordon run -it -- bash)")
	maxOutput := maxOutputFlag(fs)
	requireLandlock := fs.Bool("require-landlock", false, "refuse to run unless Landlock backs the filesystem rules")
	host := fs.String("host", "", "run through the cordon daemon at `ADDR` (unix:///path, tcp://host:port or https://host:port; default $CORDON_HOST), which creates the sandbox, from its started inits where it can, and deletes it after; without either, cordon runs the sandbox itself")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fs.Usage()
		return 2
	}
	spec, err := sf.spec()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return 2
	}
	spec.Workspace, spec.RequireLandlock = *workspace, *requireLandlock
	if *timeout > 0 {
		spec.MaxTimeout = *timeout
	}
	opts := sandbox.ExecOptions{Args: argv[1:], Timeout: *timeout, Stdout: os.Stdout, Stderr: os.Stderr, RawOutput: true, MaxOutputBytes: maxOutput()}
	if *interactive {
		// As it arrives, unbounded, ended at cordon's end of input.
		opts.StdinStream = os.Stdin
	}
	if h := cmp.Or(*host, os.Getenv("CORDON_HOST")); h != "" {
		if *workspace != "" || *requireLandlock {
			fmt.Fprintln(os.Stderr, "cordon: --workspace and --require-landlock are for a run without a daemon")
			return 2
		}
		if !isSet(fs, "tier") {
			spec.Tier = "" // the daemon's default
		}
		c, err := sclient.New(h, os.Getenv("CORDON_API_KEY"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return 2
		}
		if *tty {
			return runTerminalRemote(c, spec, argv, *timeout)
		}
		return runRemote(c, spec, argv[0], sclient.ExecOptions{Args: opts.Args, StdinStream: opts.StdinStream, Timeout: opts.Timeout, MaxOutputBytes: opts.MaxOutputBytes, Stdout: opts.Stdout, Stderr: opts.Stderr, RawOutput: true})
	}
	if !runsHere(spec) {
		// A tier or an image this build of cordon does not link.
		return execFull("run", args)
	}
	// Run here, the host directories named are this host's: by their real
	// path, which is what the tiers take.
	if err := realPaths(&spec); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return 2
	}
	if *tty {
		return runTerminal(spec, argv, *timeout)
	}
	return runIn(spec, argv[0], opts)
}

// realPaths replaces the root filesystem and layout directories spec names
// with their real paths (symbolic links resolved). A tier takes a host
// directory only by a path with no link on its way, so that what a daemon
// checked is what is mounted (host.ExactDir).
func realPaths(spec *sandbox.Spec) error {
	l := &spec.Layout
	for _, p := range []struct {
		what string
		path *string
	}{{"--rootfs", &spec.RootFS}, {"--mount outputs", &l.Outputs}, {"--mount uploads", &l.Uploads}, {"--mount scratch", &l.Scratch},
		{"--mount tool-results", &l.ToolResults}, {"--mount transcripts", &l.Transcripts}, {"--mount skills", &l.Skills}} {
		if *p.path == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(*p.path)
		if err == nil {
			real, err = filepath.Abs(real)
		}
		if err != nil {
			return fmt.Errorf("%s: %v", p.what, err)
		}
		*p.path = real
	}
	return nil
}

// runTerminal is cordon run -t: a fresh sandbox, argv on a terminal
// attached to cordon's, the sandbox gone at the end.
func runTerminal(spec sandbox.Spec, argv []string, timeout time.Duration) int {
	ctx := context.Background()
	sb, err := newProvider().Create(ctx, spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return exitCordon
	}
	code := terminal(sb.Client(), wire.SessionRequest{Command: argv[0], Args: argv[1:], TimeoutMs: timeoutMs(timeout)})
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sb.Destroy(dctx); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: teardown: %v\n", err)
		return exitCordon
	}
	return code
}

// runTerminalRemote is runTerminal through a daemon.
func runTerminalRemote(c *sclient.Client, spec sandbox.Spec, argv []string, timeout time.Duration) int {
	sb, err := c.Create(context.Background(), api.CreateRequest{Spec: toAPISpec(spec), IdleTimeoutSeconds: 60})
	if err != nil {
		return apiFail(err)
	}
	code := terminal(c.Agent(sb.ID), wire.SessionRequest{Command: argv[0], Args: argv[1:], TimeoutMs: timeoutMs(timeout)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Delete(ctx, sb.ID); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: teardown of %s: %v\n", sb.ID, err)
		return exitCordon
	}
	return code
}

// interrupt stops a command early, once: on the first SIGINT, SIGTERM or
// SIGHUP (its terminal went away), or when cordon's standard output or
// error is a pipe whose reader went away (cordon run -- yes | head -1),
// which ends a command the way SIGPIPE ends a local one.
type interrupt struct {
	once       sync.Once
	caught     atomic.Value // os.Signal
	stop, note func()
	done       chan struct{} // closed once note and stop have returned
}

// onInterrupt calls stop (after note, if set) when the command is to stop
// early. Output written through its Writer counts.
func onInterrupt(stop, note func()) *interrupt {
	in := &interrupt{stop: stop, note: note, done: make(chan struct{})}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// Asked for, SIGPIPE no longer kills cordon: a write to a closed
	// stdout or stderr fails with EPIPE, which Writer acts on. (The
	// signal itself says nothing of which descriptor broke.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go func() {
		sig := <-sigs
		fmt.Fprintln(os.Stderr, "cordon: stopping the command…")
		in.fire(sig)
	}()
	return in
}

// fire records sig and stops the command on a goroutine of its own: a
// writer that fires must return at once, for the stream it writes from to
// go on being read while the command stops.
func (in *interrupt) fire(sig os.Signal) {
	in.once.Do(func() {
		in.caught.Store(sig)
		go func() {
			defer close(in.done)
			if in.note != nil {
				in.note()
			}
			in.stop()
		}()
	})
}

// Caught reports the signal the command was stopped for, nil if none,
// once the stop has been made.
func (in *interrupt) Caught() os.Signal {
	sig, _ := in.caught.Load().(os.Signal)
	if sig != nil {
		<-in.done
	}
	return sig
}

// Writer is w (cordon's stdout or stderr), which stops the command once a
// write fails with EPIPE.
func (in *interrupt) Writer(w io.Writer) io.Writer { return pipeWriter{w, in} }

type pipeWriter struct {
	w  io.Writer
	in *interrupt
}

func (p pipeWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		p.in.fire(syscall.SIGPIPE)
	}
	return n, err
}

func runIn(spec sandbox.Spec, command string, opts sandbox.ExecOptions) int {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// Each refused connection is said at once: a client of CONNECT shows
	// only "403", not the proxy's reason.
	refusals := egress.New(egress.Config{OnRecord: func(r egress.Record) {
		if r.Decision == "refused" {
			fmt.Fprintf(os.Stderr, "cordon: %s\n", r.Message())
		}
	}})
	pr := newProvider(sandbox.WithEgressProxy(refusals))
	// The tier learns what this host offers while the signal handlers are
	// set up: neither waits for the other (each some 0.4 ms here).
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		_, _ = pr.Capabilities(spec.Tier)
	}()
	in := onInterrupt(stop, nil)
	opts.Stdout, opts.Stderr = in.Writer(opts.Stdout), in.Writer(opts.Stderr)
	<-probed
	sb, err := pr.Create(ctx, spec)
	if err != nil {
		// Interrupted while the sandbox started: what was made of it is
		// gone, and the exit status says the signal, as for a command.
		if sig := in.Caught(); sig != nil {
			return 128 + int(sig.(syscall.Signal))
		}
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return exitCordon
	}
	res, execErr := sb.Exec(ctx, command, opts)
	destroyCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The command has ended, or was stopped and its stop confirmed: what
	// is left in the sandbox has nothing to finish.
	if err := sb.Discard(destroyCtx); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: teardown: %v\n", err)
		return exitCordon
	}
	switch {
	case errors.Is(execErr, context.Canceled) && in.Caught() != nil:
		return 128 + int(in.Caught().(syscall.Signal))
	case errors.Is(execErr, sandbox.ErrDeadline):
		fmt.Fprintf(os.Stderr, "cordon: %v\n", execErr)
		return exitTimeout
	case execErr != nil:
		fmt.Fprintf(os.Stderr, "cordon: %v\n", execErr)
		return spawnExit(execErr)
	}
	return exitFor(&res.Result, opts.Timeout, spec.Limits.MemoryBytes)
}

// spawnExit is cordon's exit status for a command that failed: a shell's
// for one that could not be found (127) or executed (126), else
// exitCordon. (The agent words a failed spawn "spawn CMD ENOENT: ...".)
func spawnExit(err error) int {
	msg := err.Error()
	switch {
	case !strings.Contains(msg, "spawn "):
	case strings.Contains(msg, " ENOENT"):
		return 127
	case strings.Contains(msg, " EACCES"), strings.Contains(msg, " ENOEXEC"):
		return 126
	}
	return exitCordon
}

// parseSize reads a size as people write it: 512, 64k, 512m, 2g, 1.5G,
// 1GB, 1GiB (units are binary whatever the spelling, case aside).
func parseSize(s string) (int64, error) {
	bad := fmt.Errorf("%q is not a size like 512m, 2g or 1GB", s)
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if t != "" {
		if m, ok := map[byte]int64{'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30, 't': 1 << 40}[t[len(t)-1]]; ok {
			mult, t = m, t[:len(t)-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !(f > 0) || f*float64(mult) >= 1<<62 || t != strings.TrimSpace(t) {
		return 0, bad
	}
	n := int64(f * float64(mult))
	if n <= 0 {
		return 0, bad
	}
	return n, nil
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dg", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n>>20)
	}
	return fmt.Sprint(n)
}

type layoutFlag struct{ l *sandbox.Layout }

func (f layoutFlag) String() string { return "" }
func (f layoutFlag) Set(s string) error {
	name, dir, ok := strings.Cut(s, "=")
	if !ok || dir == "" {
		return fmt.Errorf("want NAME=DIR")
	}
	dst := map[string]*string{
		"outputs": &f.l.Outputs, "uploads": &f.l.Uploads, "scratch": &f.l.Scratch,
		"tool-results": &f.l.ToolResults, "transcripts": &f.l.Transcripts, "skills": &f.l.Skills,
	}[name]
	if dst == nil {
		return fmt.Errorf("%q is not a layout directory (outputs, uploads, scratch, tool-results, transcripts, skills)", name)
	}
	*dst = dir
	return nil
}

// egressPolicy is the policy the flags ask for, or nil for the tier's
// default (deny-all).
func egressPolicy(allow []egress.Rule, profile string, allowAll bool) (*egress.Policy, error) {
	if allowAll {
		if len(allow) > 0 || profile != "" {
			return nil, fmt.Errorf("--allow-all-egress goes alone, without --allow or --egress-profile")
		}
		return &egress.Policy{Mode: egress.AllowAll}, nil
	}
	rules := append([]egress.Rule(nil), allow...)
	if profile != "" {
		b, err := os.ReadFile(profile)
		if err != nil {
			return nil, err
		}
		var p egress.Profile
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("--egress-profile %s: %v", profile, err)
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("--egress-profile %s: %v", profile, err)
		}
		rules = append(rules, p.Hosts...)
	}
	if len(rules) == 0 {
		return nil, nil
	}
	return &egress.Policy{Mode: egress.Static, Rules: rules}, nil
}
