package runs

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/server/api"
	"github.com/cordon-sandbox/cordon/server/client"
)

var (
	//go:embed guest/entry.js
	denoEntry string
	//go:embed guest/entry.py
	pythonEntry string
)

const (
	resultMarker = "__CORDON_RUN_RESULT__"
	frameMarker  = "__CORDON_RUN_MSG__"
	// hostGrace is how long past a run's timeout the host waits for the
	// agent's own answer before it gives up on the sandbox.
	hostGrace = 5 * time.Second
	// sandboxTTL bounds a run's sandbox should the host that made it
	// vanish before it could destroy it.
	sandboxTTL = 5 * time.Minute
	// denoDefaultImportHosts are what Deno lets a module import from when
	// no --allow-import is given; a run without import hosts denies them.
	denoDefaultImportHosts = "deno.land:443,jsr.io:443,esm.sh:443,raw.esm.sh:443,cdn.jsdelivr.net:443,raw.githubusercontent.com:443,gist.githubusercontent.com:443"
)

// Label marks a run's sandbox (its value is the run's language).
const Label = "cordon.run"

// Config shapes the runs a Runner makes.
type Config struct {
	// Tier is the sandboxes' tier (the daemon's default when empty).
	Tier string
	// Image is the sandboxes' image (the tier's default root when empty);
	// it must hold the runtimes.
	Image string
	// Deno and Python are the runtimes' paths inside the sandbox
	// (default "deno" and "python3", found on the sandbox's PATH).
	Deno, Python string
	// BrokerURL is the one broker a run's bindings may name; bindings are
	// refused when it is empty.
	BrokerURL string
	// Resolver screens net and import hosts (the host's resolver when nil).
	Resolver egress.LookupNetIP
	// Egress makes the connections of the brokered http.fetch (a private
	// proxy when nil): the same decisions, screening and pinning as a
	// sandbox's own traffic.
	Egress *egress.Proxy
	Log    *slog.Logger
}

// Runner runs requests in sandboxes it takes from a daemon.
type Runner struct {
	cfg       Config
	teardowns sync.WaitGroup
}

// destroy tears a run's sandbox down in the background.
func (rn *Runner) destroy(ctx context.Context, d *client.Client, id string) {
	rn.teardowns.Add(1)
	go func() {
		defer rn.teardowns.Done()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := d.Delete(dctx, id); err != nil && !client.IsNotFound(err) {
			rn.cfg.Log.Warn("a run's sandbox was not destroyed; its TTL ends it", "sandbox", id, "err", err)
		}
	}()
}

// Wait returns once the sandboxes of finished runs are torn down.
func (rn *Runner) Wait() { rn.teardowns.Wait() }

// NewRunner returns a runner.
func NewRunner(cfg Config) *Runner {
	if cfg.Deno == "" {
		cfg.Deno = "deno"
	}
	if cfg.Python == "" {
		cfg.Python = "python3"
	}
	if cfg.Resolver == nil {
		cfg.Resolver = netResolver{}
	}
	if cfg.Egress == nil {
		cfg.Egress = egress.New(egress.Config{})
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg}
}

// Spec is the sandbox a run of memoryMb takes: equal for equal memory, so
// that a warm pool of it serves runs (cordon serve --run-pool).
func (rn *Runner) Spec(memoryMb int64) api.Spec {
	return api.Spec{Tier: rn.cfg.Tier, Image: rn.cfg.Image,
		Limits: api.Limits{MemoryBytes: (memoryMb + runtimeOverheadMb) << 20, Pids: 256}}
}

// Event is one piece of a streamed run: stdout or stderr as it comes, then
// the result.
type Event struct {
	Type   string  `json:"type"` // stdout, stderr, result
	Data   string  `json:"data,omitempty"`
	Result *Result `json:"result,omitempty"`
}

// Run checks req, runs it in a fresh sandbox from d, and returns its
// result. A request refused before anything ran is an *Invalid or an
// *EgressRefused (or a *BindingsRefused); everything after is in the
// Result. emit, when set, receives output as it arrives.
func (rn *Runner) Run(ctx context.Context, d *client.Client, req Request, emit func(Event)) (*Result, error) {
	start := time.Now()
	p, err := check(req)
	if err != nil {
		return nil, err
	}
	return rn.run(ctx, d, p, start, emit)
}

// BindingsRefused is a run whose bindings may not be used.
type BindingsRefused struct{ Reason string }

func (e *BindingsRefused) Error() string { return "bindings rejected: " + e.Reason }

func (rn *Runner) run(ctx context.Context, d *client.Client, p *plan, start time.Time, emit func(Event)) (*Result, error) {
	res := &Result{Logs: []string{}}
	ms := func(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

	// Everything the run may reach is checked before a sandbox is taken.
	t := time.Now()
	direct := p.net
	if p.Bindings != nil {
		if why := brokerRejection(p.Bindings.URL, rn.cfg.BrokerURL); why != "" {
			return nil, &BindingsRefused{why}
		}
		// The guest reaches its net hosts only through the host's fetch.
		direct = nil
	}
	netRules, err := screen(ctx, rn.cfg.Resolver, p.net)
	if err != nil {
		return nil, err
	}
	importRules, err := screen(ctx, rn.cfg.Resolver, p.imports)
	if err != nil {
		return nil, err
	}
	res.Timings.Screen = ms(t)

	t = time.Now()
	sb, err := d.Create(ctx, api.CreateRequest{Spec: rn.Spec(p.memoryMb), TTLSeconds: int64(sandboxTTL / time.Second),
		IdleTimeoutSeconds: -1, Labels: map[string]string{Label: p.Language}})
	if err != nil {
		return nil, fmt.Errorf("no sandbox for the run: %w", err)
	}
	res.Sandbox = sb.ID
	res.Timings.Sandbox = ms(t)
	// The sandbox goes once the run is over, after the answer: its
	// teardown is not the caller's wait. Its TTL ends it should this
	// process end first.
	defer rn.destroy(ctx, d, sb.ID)

	t = time.Now()
	rules := importRules
	if len(direct) > 0 {
		rules = append(slices.Clone(netRules), importRules...)
	}
	if len(rules) > 0 {
		if _, err := d.SetNetworkPolicy(ctx, sb.ID, api.Egress{Mode: string(egress.Static), Rules: rules}); err != nil {
			return rn.failed(res, start, ReasonSandbox, "the run's egress policy could not be set: "+err.Error()), nil
		}
	}
	for _, f := range p.files {
		if err := d.UploadMode(ctx, sb.ID, f.path, bytes.NewReader(f.data), int64(len(f.data)), fileMode(f.mode)); err != nil {
			return rn.failed(res, start, ReasonSandbox, fmt.Sprintf("file %s could not be placed: %v", f.path, err)), nil
		}
	}
	res.Timings.Setup = ms(t)

	t = time.Now()
	rn.exec(ctx, d, sb.ID, p, netRules, res, emit)
	res.Timings.Run = ms(t)
	res.Ms = time.Since(start).Milliseconds()
	return res, nil
}

// fileMode is a placed file's mode: 0644 unless the request gives one.
func fileMode(m int) int {
	if m == 0 {
		return 0o644
	}
	return m
}

func (rn *Runner) failed(res *Result, start time.Time, reason, msg string) *Result {
	res.OK, res.Reason, res.Error = false, reason, msg
	res.Ms = time.Since(start).Milliseconds()
	return res
}

// command is what runs in the sandbox, and the stdin it starts with.
func (rn *Runner) command(p *plan) (string, []string, []byte) {
	envelope := func(extra map[string]any) []byte {
		m := map[string]any{"source": p.Source, "input": p.Input, "secrets": p.Secrets}
		if m["input"] == nil || len(p.Input) == 0 {
			m["input"] = nil
		}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return append(b, '\n')
	}
	stdin := ""
	if p.Stdin != nil {
		stdin = *p.Stdin
	}
	switch p.Language {
	case Python:
		return rn.cfg.Python, []string{"-I", "-S", "-c", pythonEntry}, append(envelope(nil), stdin...)
	case Shell:
		return "/bin/sh", []string{"-c", p.Source}, []byte(stdin)
	}
	args := []string{"run", "--quiet", "--no-prompt", "--no-config", "--no-lock", "--no-check",
		fmt.Sprintf("--v8-flags=--max-old-space-size=%d", p.memoryMb)}
	if len(p.net) > 0 && p.Bindings == nil {
		args = append(args, "--allow-net="+strings.Join(p.net, ","))
	}
	if len(p.imports) > 0 {
		args = append(args, "--allow-import="+strings.Join(p.imports, ","))
	} else {
		args = append(args, "--deny-import="+denoDefaultImportHosts)
	}
	args = append(args, "data:application/javascript;base64,"+base64.StdEncoding.EncodeToString([]byte(denoEntry)))
	return rn.cfg.Deno, args, envelope(map[string]any{"typescript": p.Language == TypeScript, "bindings": p.Bindings != nil, "stdin": stdin})
}

// exec runs the program and fills res from what it said and how it ended.
func (rn *Runner) exec(ctx context.Context, d *client.Client, id string, p *plan, netRules []egress.Rule, res *Result, emit func(Event)) {
	timeout := time.Duration(p.timeoutMs) * time.Millisecond
	// The host holds the deadline itself: past the timeout and a grace,
	// the run is over whatever the sandbox says (the sandbox is destroyed
	// on return).
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout+hostGrace, errHostDeadline)
	defer cancel()
	out := &outputs{emit: emit, stop: cancel}
	name, args, stdin := rn.command(p)
	o := client.ExecOptions{Args: args, Timeout: timeout, MaxOutputBytes: MaxStdoutBytes, Stdout: &out.stdout, Stderr: &out.stderr,
		Env: map[string]string{"DENO_DIR": "/tmp/.deno", "DENO_NO_UPDATE_CHECK": "1", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}}
	out.stdout = lineWriter{o: out, stream: "stdout", max: MaxStdoutBytes}
	out.stderr = lineWriter{o: out, stream: "stderr", max: MaxStderrBytes, raw: true}
	var relay *relay
	if p.Bindings != nil {
		pr, pw := io.Pipe()
		relay = newRelay(runCtx, rn, id, p, netRules, pw, out)
		out.frames = relay.handle
		o.StdinStream = io.MultiReader(bytes.NewReader(stdin), pr)
	} else {
		s := string(stdin)
		o.Stdin = &s
	}
	if p.Language != Shell {
		out.results = true
	}
	wr, err := d.Exec(runCtx, id, name, o)
	out.flush()
	if relay != nil {
		// Calls still out are abandoned: their answers have no reader.
		relay.close()
	}
	res.Stdout, res.Stderr = out.stdout.text.String(), out.stderr.text.String()
	res.StdoutTruncated, res.StderrTruncated = out.stdout.over, out.stderr.over
	if wr != nil {
		res.ExitCode, res.Signal, res.TimedOut = wr.ExitCode, wr.Signal, wr.TimedOut
		res.StdoutTruncated = res.StdoutTruncated || wr.StdoutTruncated
		res.StderrTruncated = res.StderrTruncated || wr.StderrTruncated
	}
	switch {
	case out.limited():
		res.Reason, res.Error = ReasonOutput, "the run's output exceeded its limit"
	case relay != nil && relay.failure() != "":
		res.Reason, res.Error = ReasonBindings, relay.failure()
	case wr != nil && wr.TimedOut, errors.Is(context.Cause(runCtx), errHostDeadline):
		res.TimedOut = true
		res.Reason, res.Error = ReasonTimeout, fmt.Sprintf("wall-time exceeded (%dms)", p.timeoutMs)
	case ctx.Err() != nil:
		res.Reason, res.Error = ReasonCancelled, "the run was cancelled"
	case err != nil:
		res.Reason, res.Error = ReasonSandbox, "the run's sandbox failed: "+err.Error()
	case wr.OOMKills > 0 || outOfMemory(res.Stderr):
		res.Reason, res.Error = ReasonMemory, fmt.Sprintf("the run exceeded its memory (%d MiB)", p.memoryMb)
	case out.result != nil:
		r := out.result
		res.OK, res.Output, res.Logs = r.OK, r.Output, append(res.Logs, r.Logs...)
		if !r.OK {
			res.Reason, res.Error = ReasonError, r.Error
			if strings.HasPrefix(r.Error, "MemoryError") {
				res.Reason = ReasonMemory
			}
		}
	case p.Language == Shell && wr.ExitCode == 0 && wr.Signal == "":
		res.OK = true
	case p.Language == Shell:
		res.Reason, res.Error = ReasonError, fmt.Sprintf("exit status %d", wr.ExitCode)
		if wr.Signal != "" {
			res.Error = "killed by " + wr.Signal
		}
	default:
		res.Reason, res.Error = ReasonError, "the program ended without a result"
		if s := strings.TrimSpace(res.Stderr); s != "" {
			res.Error += ": " + lastLines(s, 800)
		}
	}
}

var errHostDeadline = errors.New("the run's host deadline passed")

func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "heap limit")
}

func lastLines(s string, n int) string {
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// guestResult is the entry's marked result line.
type guestResult struct {
	OK     bool            `json:"ok"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	Logs   []string        `json:"logs"`
}

// outputs splits what a run prints: its result line and binding frames
// (on stdout) are the entry's, the rest is the program's.
type outputs struct {
	mu             sync.Mutex
	emit           func(Event)
	stop           context.CancelFunc
	stdout, stderr lineWriter
	results        bool
	result         *guestResult
	frames         func(line []byte) bool
	over           bool
}

func (o *outputs) limited() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.over
}

func (o *outputs) flush() {
	o.stdout.end()
	o.stderr.end()
}

// lineWriter keeps one stream (bounded) and hands it on line by line, so
// that a marked line is never split between two events.
type lineWriter struct {
	o      *outputs
	stream string
	max    int
	raw    bool // no marked lines on this stream
	text   bytes.Buffer
	line   []byte
	total  int
	over   bool
}

func (w *lineWriter) Write(b []byte) (int, error) {
	n := len(b)
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	w.total += n
	if w.over {
		return n, nil
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.line = append(w.line, b...)
			if len(w.line) > brokerFrameCap {
				w.limit()
			}
			return n, nil
		}
		w.line = append(w.line, b[:i+1]...)
		b = b[i+1:]
		w.take()
		if w.over {
			return n, nil
		}
	}
	return n, nil
}

// take handles one whole line (with its newline, or the tail at the end).
func (w *lineWriter) take() {
	line := w.line
	w.line = w.line[:0]
	if !w.raw {
		trimmed := bytes.TrimSuffix(line, []byte("\n"))
		if w.o.results && bytes.HasPrefix(trimmed, []byte(resultMarker)) {
			var r guestResult
			if json.Unmarshal(trimmed[len(resultMarker):], &r) == nil {
				w.o.result = &r
			}
			return
		}
		if w.o.frames != nil && bytes.HasPrefix(trimmed, []byte(frameMarker)) {
			if !w.o.frames(trimmed[len(frameMarker):]) {
				w.limit()
			}
			return
		}
	}
	if w.text.Len()+len(line) > w.max {
		w.limit()
		return
	}
	w.text.Write(line)
	if w.o.emit != nil {
		w.o.emit(Event{Type: w.stream, Data: string(line)})
	}
}

func (w *lineWriter) limit() {
	w.over, w.o.over = true, true
	w.o.stop()
}

func (w *lineWriter) end() {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if len(w.line) > 0 && !w.over {
		w.take()
	}
}

// brokerRejection is why a run's bindings URL may not be used, or "": it
// must equal the configured broker URL, and there must be one.
func brokerRejection(got, want string) string {
	w := normalizeBrokerURL(want)
	if w == "" {
		return "this server has no broker URL configured (bindings fail closed)"
	}
	g := normalizeBrokerURL(got)
	if g == "" {
		return "bindings.url is not a valid http(s) URL without credentials or fragment"
	}
	if g != w {
		return "bindings.url does not match the configured broker URL"
	}
	return ""
}

// normalizeBrokerURL is origin, path without a trailing slash, and query;
// "" for anything but a plain http(s) URL.
func normalizeBrokerURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") || u.Host == "" {
		return ""
	}
	host := strings.ToLower(u.Host)
	if u.Scheme == "http" {
		host = strings.TrimSuffix(host, ":80")
	} else {
		host = strings.TrimSuffix(host, ":443")
	}
	q := ""
	if u.RawQuery != "" {
		q = "?" + u.RawQuery
	}
	return strings.ToLower(u.Scheme) + "://" + host + strings.TrimSuffix(u.EscapedPath(), "/") + q
}

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
