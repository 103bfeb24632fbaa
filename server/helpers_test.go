package server_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/metrics"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// Environment variables a test's create carries to the test backend, which
// moves them out of the sandbox's environment: agent settings (for the
// conformance suite) and a mark that names the instance.
const (
	settingPrefix = "CORDON_TEST_AGENT_"
	markVar       = "CORDON_TEST_MARK"
)

// testBackend is the process tier with two test hooks: agent settings
// passed through the spec's environment, and the started instances by mark.
type testBackend struct {
	sandbox.Backend
	mu    sync.Mutex
	insts map[string]sandbox.Instance
}

func (b *testBackend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	env := map[string]string{}
	mark := ""
	for k, v := range l.Spec.Env {
		switch {
		case strings.HasPrefix(k, settingPrefix):
			l.AgentEnv[strings.TrimPrefix(k, settingPrefix)] = v
		case k == markVar:
			mark = v
		default:
			env[k] = v
		}
	}
	l.Spec.Env = env
	inst, err := b.Backend.Start(ctx, l)
	if err == nil && mark != "" {
		b.mu.Lock()
		b.insts[mark] = inst
		b.mu.Unlock()
	}
	return inst, err
}

func (b *testBackend) Adopt(ctx context.Context, state []byte, token string) (sandbox.Instance, error) {
	return b.Backend.(sandbox.Adopter).Adopt(ctx, state, token)
}

func (b *testBackend) Sweep(ctx context.Context, keep []sandbox.Instance) error {
	return b.Backend.(sandbox.Adopter).Sweep(ctx, keep)
}

func (b *testBackend) instance(mark string) sandbox.Instance {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.insts[mark]
}

// daemon is a real cordon serve in the test process: the process tier, a
// unix socket (local admin) and a TCP listener (keys).
type daemon struct {
	srv      *server.Server
	backend  *testBackend
	sock     string
	tcp      string
	hosts    string // a directory callers may name host paths under
	stateDir string
	// processDir is the process tier's state directory.
	processDir string
	// container is the container tier, for tests that ask for it.
	container sandbox.Backend
	https     []*http.Server
	local     *sclient.Client
	// grace is the provider's sandbox.WithHostGrace (0: its default).
	grace time.Duration
	// netns is the network namespace the egress proxy dials from (a test
	// network's; the host's when empty).
	netns string
	// disks is where persistent workspaces' disks are kept (default:
	// under stateDir).
	disks string
}

func stateDir(t testing.TB) string { return testutil.StateDir(t) }

func startDaemon(t testing.TB, tune ...func(*server.Config)) *daemon {
	t.Helper()
	return startDaemonGrace(t, 0, tune...)
}

// startDaemonGrace is startDaemon with the host's grace past a command's
// timeout set (sandbox.WithHostGrace).
func startDaemonGrace(t testing.TB, grace time.Duration, tune ...func(*server.Config)) *daemon {
	t.Helper()
	return newDaemon(t, grace).start(t, tune...)
}

// containersShare reports whether name, in the container tier's state
// directory, is what stays there for every sandbox: the runtime's state,
// the identity files, skeleton roots and agent copy containers share, the
// stamp of the last sweep of cgroups, and the record of the runtime.
func containersShare(name string) bool {
	return name == "runtime" || name == ".cgroup-sweep" || name == ".runtime" || strings.HasPrefix(name, "identity-") || strings.HasPrefix(name, "skeleton-") || strings.HasPrefix(name, "agent-")
}

// newDaemon is a daemon not yet started, with a process-tier state
// directory of its own.
func newDaemon(t testing.TB, grace time.Duration) *daemon {
	t.Helper()
	testutil.RequiresRoot(t)
	// Each daemon has a process-tier state directory of its own (a daemon
	// sweeps every sandbox there that it has no record of).
	dir := filepath.Join(stateDir(t), "d-"+newMark())
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Posture: once the daemon is closed, no sandbox is left.
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "sb-") {
				t.Errorf("sandbox %s left in %s after the daemon closed", e.Name(), dir)
			}
		}
		ents, _ = os.ReadDir(filepath.Join(dir, "oci"))
		for _, e := range ents {
			if !containersShare(e.Name()) {
				t.Errorf("container %s left after the daemon closed", e.Name())
			}
		}
		os.RemoveAll(dir)
	})
	// As cordon serve runs it (its default --prestart included).
	pb := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: dir, Detached: true, Spawner: true, Prestart: 2})
	if err := pb.Probe(t.Context()); err != nil {
		testutil.Missing(t, "process tier unavailable: %v", err)
	}
	return &daemon{backend: &testBackend{Backend: pb, insts: map[string]sandbox.Instance{}}, processDir: dir, stateDir: t.TempDir(), hosts: t.TempDir(), grace: grace}
}

func (d *daemon) start(t testing.TB, tune ...func(*server.Config)) *daemon {
	t.Helper()
	// As cordon serve does: the egress proxy's metrics join the daemon's.
	reg := metrics.NewRegistry()
	var events atomic.Pointer[server.Server]
	proxy := egress.New(egress.Config{Registry: reg, NetNS: d.netns, OnRecord: func(r egress.Record) {
		if srv := events.Load(); srv != nil {
			srv.EgressRecord(r)
		}
	}})
	backends := []sandbox.Backend{d.backend}
	if d.container != nil {
		backends = append(backends, d.container)
	}
	cfg := server.Config{
		Provider:     sandbox.NewProvider(backends, sandbox.WithEgressProxy(proxy), sandbox.WithHostGrace(d.grace), sandbox.WithDisks(cmp.Or(d.disks, filepath.Join(d.stateDir, "disks")), 64<<20)),
		Registry:     reg,
		StateDir:     d.stateDir,
		HostPaths:    []string{d.hosts},
		ReapInterval: 100 * time.Millisecond,
		Log:          slog.New(slog.NewTextHandler(testLog{t}, nil)),
	}
	for _, f := range tune {
		f(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	events.Store(srv)
	d.srv = srv
	if d.sock == "" {
		d.sock = filepath.Join(t.TempDir(), "cordon.sock")
	}
	os.Remove(d.sock) // a restarted daemon listens where the last one did
	uln, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.tcp = tln.Addr().String()
	d.https = nil
	for _, ln := range []net.Listener{uln, tln} {
		hs := &http.Server{Handler: srv.Handler(), ConnContext: server.LocalConnContext, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
		hs.RegisterOnShutdown(srv.EndStreams) // as cordon serve does
		d.https = append(d.https, hs)
		go hs.Serve(ln)
	}
	d.local, _ = sclient.New("unix://"+d.sock, "")
	t.Cleanup(func() { d.stop(t, true) })
	return d
}

type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// stop ends the daemon; destroy says whether its sandboxes go too.
func (d *daemon) stop(t testing.TB, destroy bool) {
	if d.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, hs := range d.https {
		hs.Close()
	}
	var err error
	if destroy {
		err = d.srv.Close(ctx)
	} else {
		err = d.srv.Shutdown(ctx)
	}
	if err != nil {
		t.Errorf("daemon stop: %v", err)
	}
	// As cordon serve does at shutdown: the inits waiting for a create go
	// (sandboxes stay).
	if c, ok := d.backend.Backend.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	d.srv = nil
}

// tenant makes a key for name and returns a TCP client using it.
func (d *daemon) tenant(t *testing.T, name string) (*sclient.Client, string) {
	t.Helper()
	k, err := d.local.CreateKey(t.Context(), api.KeyRequest{Tenant: name})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sclient.New("http://"+d.tcp, k.Secret)
	if err != nil {
		t.Fatal(err)
	}
	return c, k.Secret
}

func create(t *testing.T, c *sclient.Client, req api.CreateRequest) *api.Sandbox {
	t.Helper()
	sb, err := c.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), sb.ID); err != nil {
			t.Errorf("delete %s: %v", sb.ID, err)
		}
	})
	return sb
}

func sh(t *testing.T, c *sclient.Client, id, script string) string {
	t.Helper()
	var out, errb strings.Builder
	res, err := c.Exec(t.Context(), id, "sh", sclient.ExecOptions{Args: []string{"-c", script}, Stdout: &out, Stderr: &errb, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s", script, res.ExitCode, errb.String())
	}
	return out.String()
}

func newMark() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// conformanceFactory creates each target through the daemon's API and
// reaches its agent at /v1/sandboxes/ID/agent on the TCP listener, with a
// tenant's daemon key as the token.
func (d *daemon) conformanceFactory(c *sclient.Client, key string) conformance.Factory {
	return func(t *testing.T, s conformance.Settings) *conformance.Target {
		mark := newMark()
		env := map[string]string{markVar: mark, settingPrefix + "IDLE_TIMEOUT_MS": "0"}
		for k, v := range s {
			env[settingPrefix+k] = v
		}
		sb, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Env: env}, IdleTimeoutSeconds: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := c.Delete(context.Background(), sb.ID); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
		inst := d.backend.instance(mark)
		tg := &conformance.Target{
			Endpoint:      client.Endpoint{Network: "tcp", Address: d.tcp, Token: key, Prefix: "/v1/sandboxes/" + sb.ID + "/agent"},
			EnvPrefix:     "CORDON_AGENT_",
			Exited:        inst.Exited(),
			ReadsAnywhere: true, // the process tier's
		}
		if x, ok := inst.(interface{ ExitCode() int }); ok {
			tg.ExitCode = x.ExitCode
		}
		if x, ok := inst.(interface{ Signal(os.Signal) error }); ok {
			tg.Signal = func(sig string) error {
				return x.Signal(map[string]syscall.Signal{"TERM": syscall.SIGTERM, "INT": syscall.SIGINT}[sig])
			}
		}
		return tg
	}
}

func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Status != status || e.Code != code {
		t.Fatalf("got %v, want %d %s", err, status, code)
	}
}

// send sends a request to the daemon over TCP with the headers hdr gives
// (name, value, ...) and returns the answer's status, body and headers.
func (d *daemon) send(t testing.TB, method, path string, body io.Reader, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+d.tcp+path, body)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// unixClient is a plain HTTP client of the daemon's unix socket (local
// admin), for requests the API's client would not send.
func (d *daemon) unixClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.sock)
	}}}
}

// subscribe follows c's events for the rest of the test (a minute at most)
// and returns once the subscription is in place.
func subscribe(t *testing.T, c *sclient.Client) (context.Context, <-chan api.Event) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	evs := make(chan api.Event, 256)
	if _, err := c.Subscribe(ctx, func(ev api.Event) error { evs <- ev; return nil }); err != nil {
		t.Fatal(err)
	}
	return ctx, evs
}

// waitEvent waits for an event of type typ about sandbox id.
func waitEvent(t *testing.T, ctx context.Context, evs <-chan api.Event, typ, id string) api.Event {
	t.Helper()
	for {
		select {
		case ev := <-evs:
			if ev.Type == typ && ev.Sandbox == id {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no %s event for %s", typ, id)
		}
	}
}
