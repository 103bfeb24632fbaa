package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/baseline"
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
func apiFail(err error) int {
	var e *api.Error
	switch {
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
		fmt.Fprintf(os.Stderr, "cordon: no cordon daemon answers at %s: start one with `cordon serve`, or name another with --host or CORDON_HOST (%v)\n", daemonAddr, err)
	case errors.As(err, &e) && e.Status == http.StatusUnauthorized:
		fmt.Fprintf(os.Stderr, "cordon: the daemon at %s refused the API key: set CORDON_API_KEY to a key it knows (%v)\n", daemonAddr, err)
	default:
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
	}
	return exitCordon
}

// toAPISpec is the daemon's form of a spec the flags built.
func toAPISpec(s sandbox.Spec) api.Spec {
	out := api.Spec{Tier: s.Tier, Image: s.Image, RootFS: s.RootFS, Env: s.Env, User: s.User,
		Limits: api.Limits{MemoryBytes: s.Limits.MemoryBytes, Pids: s.Limits.Pids, CPUs: s.Limits.CPUs, DiskBytes: s.Limits.DiskBytes},
		Layout: api.Layout{Outputs: s.Layout.Outputs, Uploads: s.Layout.Uploads, Scratch: s.Layout.Scratch,
			ToolResults: s.Layout.ToolResults, Transcripts: s.Layout.Transcripts, Skills: s.Layout.Skills},
		MaxTimeoutMs: s.MaxTimeout.Milliseconds(),
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

func createCmd(args []string) int {
	fs := newFlagSet("create", "usage: cordon create [flags]\n\nCreates a sandbox on the daemon and prints its id.")
	sf := addSpecFlags(fs, false)
	ttl := fs.Duration("ttl", 0, "destroy the sandbox after this long, whatever it is doing (0: the daemon's default)")
	idle := fs.Duration("idle", 0, "destroy it after this long without activity inside (0: the daemon's default; -1s: never)")
	pool := fs.String("pool", "", "claim from the warm pool `NAME`")
	output := fs.String("o", "", "output format: json (the sandbox, rather than its id)")
	maxTimeout := fs.Duration("max-timeout", 0, "the longest timeout its commands may be given (0: 30m; at most the daemon's --max-exec-timeout)")
	labels := labelFlag{}
	fs.Var(labels, "label", "attach a label `KEY=VALUE`; repeatable")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) > 0 {
		fs.Usage()
		return 2
	}
	spec, err := sf.spec()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return 2
	}
	spec.MaxTimeout = *maxTimeout
	req := api.CreateRequest{Spec: toAPISpec(spec), TTLSeconds: int64(ttl.Seconds()), Labels: labels, Pool: *pool}
	if *idle < 0 {
		req.IdleTimeoutSeconds = -1
	} else {
		req.IdleTimeoutSeconds = int64(idle.Seconds())
	}
	sb, err := c.Create(context.Background(), req)
	if err != nil {
		return apiFail(err)
	}
	if *output == "json" {
		return printJSON(sb)
	}
	fmt.Println(sb.ID)
	return 0
}

func lsCmd(args []string) int {
	fs := newFlagSet("ls", "usage: cordon ls [flags]\n\nLists the caller's sandboxes on the daemon.")
	state := fs.String("state", "", "only sandboxes in this state (running, paused, destroying)")
	labels := labelFlag{}
	fs.Var(labels, "label", "only sandboxes with label `KEY=VALUE`; repeatable")
	quiet := fs.Bool("q", false, "print ids only")
	output := fs.String("o", "", "output format: json")
	c, _, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	list, err := c.List(context.Background(), sclient.ListOptions{State: *state, Labels: labels})
	if err != nil {
		return apiFail(err)
	}
	if *output == "json" {
		return printJSON(list)
	}
	if *quiet {
		for _, sb := range list {
			fmt.Println(sb.ID)
		}
		return 0
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIER\tSTATE\tAGE\tEXPIRES\tLABELS")
	for _, sb := range list {
		exp := "-"
		if sb.ExpiresAt != nil {
			exp = "in " + time.Until(*sb.ExpiresAt).Round(time.Second).String()
		}
		var ls []string
		for k, v := range sb.Labels {
			ls = append(ls, k+"="+v)
		}
		sort.Strings(ls)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Spec.Tier, sb.State, time.Since(sb.CreatedAt).Round(time.Second), exp, strings.Join(ls, ","))
	}
	tw.Flush()
	return 0
}

func rmCmd(args []string) int {
	fs := newFlagSet("rm", "usage: cordon rm [flags] ID...\n\nDestroys sandboxes on the daemon, each once its teardown is confirmed.")
	c, ids, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(ids) == 0 {
		fmt.Fprintln(os.Stderr, "usage: cordon rm ID...")
		return 2
	}
	code = 0
	for _, id := range ids {
		if err := c.Delete(context.Background(), id); err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %s: %v\n", id, err)
			code = exitCordon
		}
	}
	return code
}

func execCmd(args []string) int {
	fs := newFlagSet("exec", "usage: cordon exec [flags] ID -- COMMAND [ARG...]\n\nRuns COMMAND in a sandbox on the daemon and exits with its status, as cordon\nrun does. Ctrl-C cancels the command and waits for the stop.")
	env := envFlag{}
	fs.Var(env, "env", "set an environment variable `K=V`; repeatable")
	timeout := fs.Duration("timeout", 0, "stop the command after this long (0: the agent's default)")
	cwd := fs.String("cwd", "", "working directory inside")
	interactive := fs.Bool("i", false, "pass cordon's standard input to the command")
	output := fs.String("o", "", "output format: json (the command's output and result as one object, once it ends)")
	maxOutput := maxOutputFlag(fs)
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
	opts := sclient.ExecOptions{Args: argv[1:], Cwd: *cwd, Env: env, Timeout: *timeout, Stdout: os.Stdout, Stderr: os.Stderr, RawOutput: true}
	var err error
	if opts.MaxOutputBytes, err = maxOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return 2
	}
	if *interactive {
		if opts.Stdin, err = readStdin(); err != nil {
			return apiFail(err)
		}
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

func cpCmd(args []string) int {
	fs := newFlagSet("cp", "usage: cordon cp [flags] SRC DST\n\nCopies a file or a directory into or out of a sandbox; the sandbox side is\nID:PATH (a relative PATH is under /workspace), the other a local path or -\nfor standard input or output (a directory copied out to - is a tar\nstream; --tar unpacks one from standard input into the sandbox). Files\nstream in constant memory, with a progress bar on a terminal; each file is\nreplaced atomically. Directories and regular files are copied, with their\npermission bits and never a set-id bit; symbolic links and special files\nare skipped, and said so.")
	asTar := fs.Bool("tar", false, "SRC is - and a tar stream, unpacked into the sandbox directory DST")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) != 2 {
		fs.Usage()
		return 2
	}
	src, dst := rest[0], rest[1]
	sid, spath, fromSandbox := sandboxPath(src)
	did, dpath, toSandbox := sandboxPath(dst)
	ctx := context.Background()
	switch {
	case fromSandbox == toSandbox:
		fmt.Fprintln(os.Stderr, "cordon: cp copies between a sandbox (ID:PATH) and a local path")
		return 2
	case toSandbox && *asTar:
		if src != "-" {
			fmt.Fprintln(os.Stderr, "cordon: cp --tar reads the tar stream from standard input: SRC is -")
			return 2
		}
		if err := uploadTar(ctx, c, did, os.Stdin, dpath); err != nil {
			return apiFail(err)
		}
	case toSandbox:
		if st, err := os.Stat(src); src != "-" && err == nil && st.IsDir() {
			// Into an existing directory, as its child of the same name.
			if fi, err := c.Stat(ctx, did, dpath); err == nil && fi.Type == "dir" {
				dpath = path.Join(dpath, filepath.Base(src))
			}
			if err := uploadTree(ctx, c, did, src, dpath); err != nil {
				return apiFail(err)
			}
			return 0
		}
		var r io.Reader = os.Stdin
		size := int64(-1)
		if src != "-" {
			f, err := os.Open(src)
			if err != nil {
				return apiFail(err)
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return apiFail(err)
			}
			r, size = f, st.Size()
		} else {
			// An upload needs its length up front: spool standard input.
			tmp, err := os.CreateTemp("", "cordon-cp-*")
			if err != nil {
				return apiFail(err)
			}
			defer os.Remove(tmp.Name())
			defer tmp.Close()
			if size, err = io.Copy(tmp, os.Stdin); err != nil {
				return apiFail(err)
			}
			if _, err := tmp.Seek(0, 0); err != nil {
				return apiFail(err)
			}
			r = tmp
		}
		pb := newProgress(dst, size)
		err := c.Upload(ctx, did, dpath, pb.reader(r), size)
		pb.done(err)
		if err != nil {
			return apiFail(err)
		}
	default:
		var size int64 = -1
		fi, err := c.Stat(ctx, sid, spath)
		if err == nil {
			size = fi.Size
		}
		if err == nil && fi.Type == "dir" {
			switch {
			case dst == "-":
				err = downloadTar(ctx, c, sid, spath, os.Stdout)
			default:
				if st, serr := os.Stat(dst); serr == nil && st.IsDir() {
					dst = filepath.Join(dst, path.Base(spath))
				}
				err = downloadTree(ctx, c, sid, spath, dst)
			}
			if err != nil {
				return apiFail(err)
			}
			return 0
		}
		pb := newProgress(src, size)
		if dst == "-" {
			_, err = c.Download(ctx, sid, spath, 0, 0, pb.writer(os.Stdout))
		} else {
			err = downloadAtomically(ctx, c, sid, spath, dst, pb)
		}
		pb.done(err)
		if err != nil {
			return apiFail(err)
		}
	}
	return 0
}

// sandboxPath splits ID:PATH; a local path has no colon before its first
// slash.
func sandboxPath(s string) (id, path string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// downloadAtomically writes to a temporary sibling and renames it over dst
// only once the whole file arrived, so a broken transfer leaves dst as it
// was.
func downloadAtomically(ctx context.Context, c *sclient.Client, id, path, dst string, pb *progress) error {
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, filepath.Base(path))
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".cordon-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := c.Download(ctx, id, path, 0, 0, pb.writer(tmp)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// progress draws a progress bar on standard error when it is a terminal
// and the file is large enough to wait for; otherwise it stays silent.
type progress struct {
	name       string
	size, n    int64
	start      time.Time
	last       time.Time
	tty, shown bool
}

func newProgress(name string, size int64) *progress {
	return &progress{name: name, size: size, start: time.Now(), tty: isTerminal(os.Stderr) && (size < 0 || size >= 1<<20)}
}

func (p *progress) add(n int) {
	p.n += int64(n)
	if !p.tty || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.shown = time.Now(), true
	rate := float64(p.n) / max(time.Since(p.start).Seconds(), 1e-3)
	if p.size > 0 {
		width := 30
		fill := int(float64(width) * float64(p.n) / float64(p.size))
		fmt.Fprintf(os.Stderr, "\r%s [%s%s] %s / %s  %s/s ", p.name, strings.Repeat("=", fill), strings.Repeat(" ", max(width-fill, 0)), humanSize(p.n), humanSize(p.size), humanSize(int64(rate)))
	} else {
		fmt.Fprintf(os.Stderr, "\r%s %s  %s/s ", p.name, humanSize(p.n), humanSize(int64(rate)))
	}
}

func (p *progress) done(err error) {
	if p.shown {
		p.last = time.Time{}
		p.add(0)
		fmt.Fprintln(os.Stderr)
	}
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(n)
	return n, err
}

type progressWriter struct {
	w io.Writer
	p *progress
}

func (w progressWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.p.add(n)
	return n, err
}

func (p *progress) reader(r io.Reader) io.Reader { return progressReader{r, p} }
func (p *progress) writer(w io.Writer) io.Writer { return progressWriter{w, p} }

func eventsCmd(args []string) int {
	fs := newFlagSet("events", "usage: cordon events [flags]\n\nFollows the daemon's events about the caller's sandboxes (created, ready,\nexec.started, exec.finished, oom, lost, destroyed, ...) until interrupted.")
	c, _, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.Events(ctx, func(ev api.Event) error {
		data := ""
		if len(ev.Data) > 0 {
			var kv []string
			for k, v := range ev.Data {
				kv = append(kv, fmt.Sprintf("%s=%v", k, v))
			}
			sort.Strings(kv)
			data = strings.Join(kv, " ")
		}
		_, err := fmt.Printf("%s %-14s %s %s\n", ev.Time.Local().Format(time.RFC3339Nano), ev.Type, ev.Sandbox, data)
		return err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return apiFail(err)
	}
	return 0
}
