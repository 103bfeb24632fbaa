package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
)

// fakeBackend serves a healthz with a chosen protocol version and can be
// told to fail its teardown.
type fakeBackend struct {
	version      int
	caps         sandbox.Capabilities
	failDestroys atomic.Int32
	destroys     atomic.Int32
	started      atomic.Int32
}

func (f *fakeBackend) Name() string                       { return "fake" }
func (f *fakeBackend) Capabilities() sandbox.Capabilities { return f.caps }
func (f *fakeBackend) Probe(ctx context.Context) error    { return nil }
func (f *fakeBackend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	f.started.Add(1)
	dir, err := os.MkdirTemp("", "fake-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"ok":true,"protocolVersion":%d}`, f.version)
	})}
	go srv.Serve(ln)
	return &fakeInstance{f: f, srv: srv, dir: dir, ep: client.Endpoint{Network: "unix", Address: sock, Token: l.Token}, exited: make(chan struct{})}, nil
}

type fakeInstance struct {
	f      *fakeBackend
	srv    *http.Server
	dir    string
	ep     client.Endpoint
	exited chan struct{}
}

func (i *fakeInstance) Endpoint() client.Endpoint { return i.ep }
func (i *fakeInstance) Exited() <-chan struct{}   { return i.exited }
func (i *fakeInstance) Diagnostics() string       { return "" }
func (i *fakeInstance) Destroy(ctx context.Context) error {
	i.f.destroys.Add(1)
	if i.f.failDestroys.Add(-1) >= 0 {
		return fmt.Errorf("%w: told to fail", sandbox.ErrTeardown)
	}
	i.srv.Close()
	return os.RemoveAll(i.dir)
}

func TestCreateChecks(t *testing.T) {
	fb := &fakeBackend{version: 2}
	p := sandbox.NewProvider([]sandbox.Backend{fb})
	if _, err := p.Create(t.Context(), sandbox.Spec{Tier: "nope"}); !errors.Is(err, sandbox.ErrUnknownTier) {
		t.Errorf("unknown tier: %v", err)
	}
	// No image cache was given (sandbox.WithImages): an image is refused
	// by a tier that could run it, and nothing is started for it.
	rooted := &fakeBackend{version: 2, caps: sandbox.Capabilities{RootFS: true}}
	if _, err := sandbox.NewProvider([]sandbox.Backend{rooted}).Create(t.Context(), sandbox.Spec{Image: "debian.test/none"}); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(fmt.Sprint(err), "no image cache") || rooted.started.Load() != 0 {
		t.Errorf("an image without a cache: %v (%d started)", err, rooted.started.Load())
	}
	for _, s := range []sandbox.Spec{
		{Limits: sandbox.Limits{Pids: -1}},
		{Limits: sandbox.Limits{MemoryBytes: 4096}},
		{Limits: sandbox.Limits{Pids: 1 << 40}},
		{Limits: sandbox.Limits{CPUs: 1e-4}},
		{Env: map[string]string{"A": "x\x00y"}},
		{Env: map[string]string{"A=B": "x"}},
		{Env: map[string]string{"CORDON_AGENT_TOKEN": "x"}},
	} {
		if _, err := p.Create(t.Context(), s); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("spec %+v: %v", s, err)
		}
	}
	if _, err := p.Create(t.Context(), sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("unsupported limit: %v", err)
	}
	if n := fb.started.Load(); n != 0 {
		t.Fatalf("a refused spec started %d instances", n)
	}
}

func TestProtocolMismatchIsRefusedAndTornDown(t *testing.T) {
	for _, v := range []int{0, 1, 3} {
		fb := &fakeBackend{version: v}
		_, err := sandbox.NewProvider([]sandbox.Backend{fb}).Create(t.Context(), sandbox.Spec{})
		if !errors.Is(err, sandbox.ErrAgent) || !errors.Is(err, client.ErrProtocolMismatch) {
			t.Errorf("version %d: %v", v, err)
		}
		if fb.destroys.Load() != 1 {
			t.Errorf("version %d: %d destroys, want 1", v, fb.destroys.Load())
		}
	}
}

func TestFailedTeardownIsRetried(t *testing.T) {
	fb := &fakeBackend{version: 2}
	fb.failDestroys.Store(1)
	sb, err := sandbox.NewProvider([]sandbox.Backend{fb}).Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); !errors.Is(err, sandbox.ErrTeardown) {
		t.Fatalf("first destroy: %v, want ErrTeardown", err)
	}
	if _, err := sb.ReadFile(t.Context(), "x"); errors.Is(err, sandbox.ErrDestroyed) {
		t.Fatal("a sandbox whose teardown failed was reported destroyed")
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatalf("retried destroy: %v", err)
	}
	if _, err := sb.ReadFile(t.Context(), "x"); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Fatalf("after destroy: %v", err)
	}
}

// TestBinaryStreamsNeedTheFeatures: bytes that are not UTF-8 cannot cross
// as text, so an agent without "stdin-base64" or "output-base64" gets a
// refusal, not a command whose input or output is silently altered.
func TestBinaryStreamsNeedTheFeatures(t *testing.T) {
	fb := &fakeBackend{version: 2}
	sb, err := sandbox.NewProvider([]sandbox.Backend{fb}).Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	in := "\xff\xfe"
	if _, err := sb.Exec(t.Context(), "cat", sandbox.ExecOptions{Stdin: &in}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("binary stdin to an agent without stdin-base64: %v", err)
	}
	if _, err := sb.Exec(t.Context(), "cat", sandbox.ExecOptions{RawOutput: true}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("raw output from an agent without output-base64: %v", err)
	}
}

// TestSweepUnavailableTier: a tier this host does not offer, holding none
// of the kept sandboxes, is no sweep failure (a daemon without an engine
// or a cluster starts without an error); one that holds a kept sandbox
// is.
func TestSweepUnavailableTier(t *testing.T) {
	agent := testutil.BuildAgent(t)
	live := sandboxtest.NewFake(sandboxtest.FakeConfig{Name: "process", AgentPath: agent, StateDir: t.TempDir()})
	absent := sandboxtest.NewFake(sandboxtest.FakeConfig{Name: "docker", AgentPath: agent, StateDir: t.TempDir()})
	absent.FailSweeps(fmt.Errorf("%w: docker: no engine", sandbox.ErrUnavailable))
	p := sandbox.NewProvider([]sandbox.Backend{live, absent})
	if err := p.Sweep(t.Context(), nil); err != nil {
		t.Fatalf("an unavailable tier holding nothing: %v", err)
	}
	// (The same tier answering when it holds a kept sandbox.)
	absent.FailSweeps(nil)
	sb, err := p.Create(t.Context(), sandbox.Spec{Tier: "docker"})
	if err != nil {
		t.Fatal(err)
	}
	absent.FailSweeps(fmt.Errorf("%w: docker: no engine", sandbox.ErrUnavailable))
	if err := p.Sweep(t.Context(), []*sandbox.Sandbox{sb}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("an unavailable tier holding a kept sandbox: %v, want ErrUnavailable", err)
	}
	absent.FailSweeps(nil)
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestDefaultLimits: a provider's default limits fill in what a spec leaves
// out, each only where the tier can enforce it (elsewhere the create goes
// on without it, not refused); a spec's own limits win, a memory limit of
// the spec's own sizes the writable space, and a tier whose sandboxes have
// memory of their own gets no default space.
func TestDefaultLimits(t *testing.T) {
	all := sandbox.Capabilities{MemoryLimit: true, PidsLimit: true, CPULimit: true, DiskLimit: true}
	noPids, vm := all, all
	noPids.PidsLimit = false
	vm.OwnMemory = true
	defaults := sandbox.Limits{Pids: 1024, DiskBytes: 1 << 30}
	withMemory := sandbox.Limits{MemoryBytes: 256 << 20, CPUs: 0.5, DiskBytes: 1 << 30}
	for _, c := range []struct {
		name       string
		caps       sandbox.Capabilities
		defaults   sandbox.Limits
		spec, want sandbox.Limits
	}{
		{"None", all, defaults, sandbox.Limits{}, sandbox.Limits{Pids: 1024, DiskBytes: 1 << 30}},
		{"OwnMemory", all, defaults, sandbox.Limits{MemoryBytes: 64 << 20}, sandbox.Limits{MemoryBytes: 64 << 20, Pids: 1024}},
		{"OwnLimits", all, defaults, sandbox.Limits{Pids: 10, DiskBytes: 2 << 20}, sandbox.Limits{Pids: 10, DiskBytes: 2 << 20}},
		{"TierWithoutPids", noPids, defaults, sandbox.Limits{}, sandbox.Limits{DiskBytes: 1 << 30}},
		{"VM", vm, defaults, sandbox.Limits{}, sandbox.Limits{Pids: 1024}},
		{"DefaultMemoryHoldsSpace", all, withMemory, sandbox.Limits{}, sandbox.Limits{MemoryBytes: 256 << 20, CPUs: 0.5, DiskBytes: 256 << 20}},
		{"NoDefaults", all, sandbox.Limits{}, sandbox.Limits{}, sandbox.Limits{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fb := &fakeBackend{version: 2, caps: c.caps}
			p := sandbox.NewProvider([]sandbox.Backend{fb}, sandbox.WithDefaultLimits(c.defaults))
			sb, err := p.Create(t.Context(), sandbox.Spec{Limits: c.spec})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(context.Background())
			if got := sb.Spec().Limits; got != c.want {
				t.Errorf("limits %+v, want %+v", got, c.want)
			}
		})
	}
}
