//go:build linux

package docker_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/docker"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopEngine()
	os.Exit(code)
}

// testImage is a Debian minbase with the suites' tools, imported into the
// engine (nothing can be pulled here).
const testImage = testutil.EngineImage

// engine is the private Docker engine these tests run against (backend
// starts it).
var engine *testutil.Dockerd

func backend(t *testing.T) *docker.Backend { return backendTB(t) }

func backendTB(t testing.TB) *docker.Backend {
	t.Helper()
	engine = testutil.Engine(t)
	b := docker.New(docker.Config{Host: engine.Host, Image: testImage, AgentPath: testutil.BuildAgent(t), StateDir: testutil.StateDir(t), Owner: "test-" + t.Name()})
	if err := b.Probe(t.Context()); err != nil {
		t.Fatalf("the engine is up, and the tier is not: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func create(t *testing.T, b *docker.Backend, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	return sandboxtest.Create(t, b, spec)
}

func sh(t *testing.T, sb *sandbox.Sandbox, script string) (string, *sandbox.Result) {
	t.Helper()
	return sandboxtest.Sh(t, sb, script)
}

func TestConformance(t *testing.T) {
	// The engine's runc shares the host's kernel: tcp-connect hands the
	// socket over.
	conformance.Run(t, conformance.PassingTCP(conformance.FromBackend(backend(t), sandbox.Spec{})))
}

func TestAdversarial(t *testing.T) {
	b := backend(t)
	adversarial.Run(t, func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox { return create(t, b, spec) })
}

// TestContainer: what the engine made is what the baseline says, seen
// from inside and through the engine: no capabilities, no new privileges,
// no network, a read-only image, executable writable scratch, the
// sandbox user, and the token in no configuration the engine keeps.
func TestContainer(t *testing.T) {
	b := backend(t)
	sb := create(t, b, sandbox.Spec{})
	out, res := sh(t, sb, `id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; ls /sys/class/net;
touch /usr/x 2>&1 | grep -o 'Read-only' ; printf '#!/bin/sh\necho ran\n' > /workspace/x.sh && chmod +x /workspace/x.sh && /workspace/x.sh`)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	for _, want := range []string{"1000\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "lo\n", "Read-only", "ran"} {
		if !strings.Contains(out, want) {
			t.Errorf("inside, want %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "eth0") {
		t.Errorf("the container has a network interface:\n%s", out)
	}
	ids := engine.Docker(t, "ps", "-q", "--filter", "label="+docker.LabelTier+"="+docker.Name)
	if ids == "" {
		t.Fatal("the engine lists no container of the tier")
	}
	inspect := engine.Docker(t, "inspect", strings.Fields(ids)[0])
	if tok := sb.Client().Endpoint().Token; strings.Contains(inspect, tok) {
		t.Fatal("the agent's token is in the container's configuration")
	}
}

// TestTeardown: a destroyed sandbox's container is gone from the engine,
// and its directory from the host.
func TestTeardown(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ids := engine.Docker(t, "ps", "-aq", "--filter", "label="+docker.LabelOwner+"=test-"+t.Name()); ids != "" {
		t.Fatalf("containers left: %s", ids)
	}
	ents, _ := os.ReadDir(b.StateDir())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "cordon-") {
			t.Errorf("%s left in the state directory", e.Name())
		}
	}
}

// TestImageRefused: an image the engine has not and cannot pull is the
// caller's mistake, said as such, and leaves nothing behind.
func TestImageRefused(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	_, err := p.Create(t.Context(), sandbox.Spec{Image: "cordon-test.invalid/none:1"})
	if !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("got %v, want ErrInvalidSpec", err)
	}
	if ids := engine.Docker(t, "ps", "-aq", "--filter", "label="+docker.LabelOwner+"=test-"+t.Name()); ids != "" {
		t.Fatalf("containers left: %s", ids)
	}
}

// TestAdoptAndSweep: detached sandboxes outlive the backend that made
// them; a later one (a restarted daemon) takes one back by its state and
// token, and sweeps the other, which it does not hold, with its container.
func TestAdoptAndSweep(t *testing.T) {
	b := backend(t)
	cfg := func() docker.Config {
		return docker.Config{Host: engine.Host, Image: testImage, AgentPath: testutil.BuildAgent(t), StateDir: b.StateDir(), Owner: "test-adopt", Detached: true}
	}
	first := docker.New(cfg())
	p := sandbox.NewProvider([]sandbox.Backend{first})
	kept, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	stray, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	ad, err := kept.Persist()
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := sh(t, kept, "echo before > /workspace/mark; echo ok"); out != "ok\n" {
		t.Fatalf("before: %q", out)
	}
	_ = stray // left for the sweep
	first.Close()

	second := docker.New(cfg())
	defer second.Close()
	p2 := sandbox.NewProvider([]sandbox.Backend{second})
	back, err := p2.Adopt(t.Context(), *ad, kept.Spec())
	if err != nil {
		t.Fatal(err)
	}
	defer back.Destroy(context.Background())
	if out, _ := sh(t, back, "cat /workspace/mark"); out != "before\n" {
		t.Fatalf("the adopted sandbox has %q", out)
	}
	if err := p2.Sweep(t.Context(), []*sandbox.Sandbox{back}); err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(engine.Docker(t, "ps", "-aq", "--filter", "label="+docker.LabelOwner+"=test-adopt"))
	if len(ids) != 1 {
		t.Fatalf("after the sweep the engine holds %d containers of the owner, want the adopted one", len(ids))
	}
	if err := back.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ids := engine.Docker(t, "ps", "-aq", "--filter", "label="+docker.LabelOwner+"=test-adopt"); ids != "" {
		t.Fatalf("containers left: %s", ids)
	}
}

func creator(b *docker.Backend) adversarial.Create {
	return func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox { return create(t, b, spec) }
}

// TestLimits: memory, pids (the workload's own cgroup under the
// container's, exact) and CPU limits hold as on the other tiers.
func TestLimits(t *testing.T) {
	b := backend(t)
	adversarial.Limits(t, b.Capabilities(), creator(b))
}

func TestEscapeesDie(t *testing.T) { adversarial.Escapees(t, creator(backend(t))) }

// TestLandlock: commands' writes are confined with Landlock as on the
// process tier.
func TestLandlock(t *testing.T) { adversarial.Landlock(t, creator(backend(t))) }

// TestHostDeadline: see adversarial.HostDeadline.
func TestHostDeadline(t *testing.T) { adversarial.HostDeadline(t, backend(t)) }

// TestLayoutRefused: layout directories, a root directory and commands as
// root are not offered on this tier (without a user namespace of the
// sandbox's own, a bind would write as its uid on the host, and root is
// the host's): refused, not ignored.
func TestLayoutRefused(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	if _, err := p.Create(t.Context(), sandbox.Spec{Layout: sandbox.Layout{Outputs: t.TempDir()}}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("layout: %v, want a refusal", err)
	}
	if _, err := p.Create(t.Context(), sandbox.Spec{RootFS: t.TempDir()}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("a root directory: %v, want a refusal", err)
	}
	root := 0
	if _, err := p.Create(t.Context(), sandbox.Spec{User: &root}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("commands as root: %v, want a refusal", err)
	}
	if ids := engine.Docker(t, "ps", "-aq", "--filter", "label="+docker.LabelOwner+"=test-"+t.Name()); ids != "" {
		t.Fatalf("containers left by the refusals: %s", ids)
	}
}

// TestPause: the engine freezes every process of a sandbox, its agent
// included, and thaws them; a paused sandbox is destroyed all the same.
func TestPause(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.PauseResume(t, sb)
}
