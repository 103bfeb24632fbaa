package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	agentclient "github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/internal/printable"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
	"golang.org/x/sys/unix"
)

// The verbs that talk to a daemon: create, ls, exec, cp, rm, events. The
// daemon is --host, else CORDON_HOST, else the default socket; the key is
// CORDON_API_KEY (none is needed on the unix socket).

func daemonClient(fs *flag.FlagSet, args []string) (*sclient.Client, []string, int) {
	host := fs.String("host", "", "the daemon: unix:///path, tcp://host:port or https://host:port (default $CORDON_HOST, else "+defaultSocket()+")")
	rest, code, ok := parseInterspersed(fs, args)
	if !ok {
		return nil, nil, code
	}
	h := cmp.Or(*host, os.Getenv("CORDON_HOST"))
	if h == "" {
		if err := ownSocket(defaultSocket()); err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return nil, nil, exitCordon
		}
		h = "unix://" + defaultSocket()
	}
	c, err := sclient.New(h, os.Getenv("CORDON_API_KEY"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return nil, nil, 2
	}
	daemonAddr = h
	return c, rest, 0
}

// daemonClientArgs is daemonClient for a verb that takes exactly n
// arguments: another count prints its usage (status 2).
func daemonClientArgs(fs *flag.FlagSet, args []string, n int) (*sclient.Client, []string, int) {
	c, rest, code := daemonClient(fs, args)
	if c != nil && len(rest) != n {
		fs.Usage()
		return nil, nil, 2
	}
	return c, rest, code
}

// ownSocket refuses a default socket that belongs to another user than
// this one or root: without $XDG_RUNTIME_DIR the default is under the temp
// directory, where anyone may have made it first, and whoever listens
// there would receive every command. (A daemon named with --host or
// CORDON_HOST is the caller's choice.)
func ownSocket(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return nil // nothing there: the connection says so
	}
	if st.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("the default daemon socket %s is not a socket (%v)", path, st.Mode().Type())
	}
	if owner := int(st.Sys().(*syscall.Stat_t).Uid); owner != os.Geteuid() && owner != 0 {
		return fmt.Errorf("the default daemon socket %s belongs to uid %d, not to this user: another user's program may be listening there; name the daemon with --host or CORDON_HOST, or set XDG_RUNTIME_DIR", path, owner)
	}
	return nil
}

// daemonAddr is the daemon the verb talks to, for apiFail.
var daemonAddr string

// apiFail says why a request to the daemon failed, and what to do where
// the cause is the caller's: no daemon at the address, or a key it
// refused.
func apiFail(err error) int { return apiFailOn("", err) }

// apiFailOn is apiFail for a verb acting on many sandboxes: the daemon's
// word is said of id.
func apiFailOn(id string, err error) int {
	var e *api.Error
	var dial *net.OpError
	var ae *agentclient.Error
	if errors.As(err, &ae) && !errors.As(err, &e) {
		// Through the daemon's agent routes (shell, sessions) the daemon's
		// own refusals, no sandbox of that id among them, come as the
		// agent client's: said as the daemon's are.
		err = &api.Error{Code: ae.Code, Message: ae.Message, Status: ae.Status}
	}
	switch {
	// Only a dial's: a local file that is not there (cordon cp) is not a
	// daemon that is not there.
	case errors.As(err, &dial) && dial.Op == "dial" && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)):
		fmt.Fprintf(os.Stderr, "cordon: no cordon daemon answers at %s: start one with `cordon serve`, or name another with --host or CORDON_HOST (%v)\n", daemonAddr, err)
	case errors.As(err, &e) && e.Status == http.StatusUnauthorized:
		fmt.Fprintf(os.Stderr, "cordon: the daemon at %s refused the API key: set CORDON_API_KEY to a key it knows (%v)\n", daemonAddr, err)
	default:
		// The daemon's word, which may quote a sandbox's (a file's name,
		// a command's): shown escaped where it holds what a terminal
		// would act on.
		if id != "" {
			id = printable.String(id) + ": "
		}
		fmt.Fprintf(os.Stderr, "cordon: %s%s\n", id, printable.String(err.Error()))
	}
	return exitCordon
}

// toAPISpec is the daemon's form of a spec the flags built.
func toAPISpec(s sandbox.Spec) api.Spec {
	out := api.Spec{Tier: s.Tier, Image: s.Image, RootFS: s.RootFS, Env: s.Env, User: s.User,
		Limits: api.Limits{MemoryBytes: s.Limits.MemoryBytes, Pids: s.Limits.Pids, CPUs: s.Limits.CPUs, DiskBytes: s.Limits.DiskBytes},
		Layout: api.Layout{Outputs: s.Layout.Outputs, Uploads: s.Layout.Uploads, Scratch: s.Layout.Scratch,
			ToolResults: s.Layout.ToolResults, Transcripts: s.Layout.Transcripts, Skills: s.Layout.Skills},
		MaxTimeoutMs:        s.MaxTimeout.Milliseconds(),
		PersistentWorkspace: s.PersistentWorkspace,
		RuntimeClass:        s.RuntimeClass,
	}
	if o := s.Layout.Owner; o != nil {
		out.Layout.Owner = &api.Owner{UID: o.UID, GID: o.GID}
	}
	if p := s.Egress; p != nil {
		out.Egress = &api.Egress{Mode: string(p.Mode), Rules: p.Rules}
	}
	return out
}

type labelFlag map[string]string

func (l labelFlag) String() string { return "" }
func (l labelFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE")
	}
	l[k] = v
	return nil
}

// runRemote is `cordon run` through a daemon: a sandbox created for the
// command (claimed from the daemon's started inits where it can), the
// command, and the sandbox deleted. Should cordon be killed meanwhile, the
// daemon reaps the sandbox a minute after the command ends.
func runRemote(c *sclient.Client, spec sandbox.Spec, command string, opts sclient.ExecOptions) int {
	sb, err := c.Create(context.Background(), api.CreateRequest{Spec: toAPISpec(spec), IdleTimeoutSeconds: 60})
	if err != nil {
		return apiFail(err)
	}
	code := execRemote(c, sb.ID, command, opts, spec.Limits.MemoryBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Delete(ctx, sb.ID); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: teardown of %s: %v\n", sb.ID, err)
		return exitCordon
	}
	return code
}

// exitFor maps a command's result to cordon's exit status, saying on
// stderr what cut the command or its output short; memory is the
// sandbox's limit, when known, to name it.
func exitFor(res *wire.Result, timeout time.Duration, memory int64) int {
	for _, cut := range []struct {
		truncated bool
		stream    string
	}{{res.StdoutTruncated, "stdout"}, {res.StderrTruncated, "stderr"}} {
		if cut.truncated {
			fmt.Fprintf(os.Stderr, "cordon: the command's %s was cut at --max-output\n", cut.stream)
		}
	}
	if res.LeftoversStopped {
		fmt.Fprintln(os.Stderr, "cordon: the command exited; what it left running was stopped (start programs meant to outlive a command with cordon exec -d)")
	}
	hint := ""
	if memory > 0 {
		hint = " (--memory " + humanSize(memory) + ")"
	}
	switch {
	case res.OOMKills > 0 && res.Signal == "SIGKILL":
		fmt.Fprintf(os.Stderr, "cordon: the command was killed: the sandbox ran out of memory%s\n", hint)
		return exitOOM
	case res.OOMKills > 0:
		// A child the command outlived (a shell goes on after a kill).
		fmt.Fprintf(os.Stderr, "cordon: %d of the command's processes killed: the sandbox ran out of memory%s\n", res.OOMKills, hint)
	}
	switch {
	case res.TimedOut:
		if timeout == 0 {
			timeout = baseline.DefaultTimeout
		}
		fmt.Fprintf(os.Stderr, "cordon: the command timed out after %s and was stopped\n", timeout)
		return exitTimeout
	case res.Signal != "":
		fmt.Fprintf(os.Stderr, "cordon: the command was killed by %s\n", res.Signal)
		return 128 + int(unix.SignalNum(res.Signal))
	}
	return res.ExitCode
}

// defaultSocket is where the daemon listens unless told otherwise.
func defaultSocket() string {
	if os.Geteuid() == 0 {
		return sclient.DefaultSocket
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "cordon.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("cordon-%d.sock", os.Geteuid()))
}
