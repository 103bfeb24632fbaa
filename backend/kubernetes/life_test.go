//go:build linux

package kubernetes_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/kubernetes"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
)

// objects lists the tier's objects of owner in the cluster: pods, secrets
// and network policies, by name.
func objects(t *testing.T, owner string) string {
	t.Helper()
	return testutil.Cluster(t).Kubectl(t, "get", "pods,secrets,networkpolicies", "-l", kubernetes.LabelOwner+"="+owner, "-o", "name")
}

// TestTeardown: a destroyed sandbox's pod, secret and network policy are
// gone from the cluster once Destroy returns.
func TestTeardown(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if got := objects(t, owner(t)); strings.Count(got, "\n") != 2 {
		t.Fatalf("a live sandbox's objects: %q, want a pod, a secret and a network policy", got)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := objects(t, owner(t)); got != "" {
		t.Fatalf("left after Destroy: %s", got)
	}
}

// TestRefusals: what the tier cannot give is refused before anything is
// made: an image the cluster cannot pull (the caller's mistake, said so),
// layout directories, a root directory, commands as root, a pids limit.
func TestRefusals(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	if _, err := p.Create(t.Context(), sandbox.Spec{Image: "cordon-test.invalid/none:1"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("an image that cannot be pulled: got %v, want ErrInvalidSpec", err)
	}
	root := 0
	for name, spec := range map[string]sandbox.Spec{
		"layout":         {Layout: sandbox.Layout{Outputs: t.TempDir()}},
		"root directory": {RootFS: t.TempDir()},
		"root":           {User: &root},
		"pids limit":     {Limits: sandbox.Limits{Pids: 64}},
	} {
		if _, err := p.Create(t.Context(), spec); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("%s: got %v, want a refusal", name, err)
		}
	}
	if got := objects(t, owner(t)); got != "" {
		t.Fatalf("left by the refusals: %s", got)
	}
	// A namespace the cluster has not is the operator's to make, said so.
	cfg := configFor(t, owner(t))
	cfg.Namespace = "cordon-test-none"
	nb := kubernetes.New(cfg)
	defer nb.Close()
	if _, err := sandbox.NewProvider([]sandbox.Backend{nb}).Create(t.Context(), sandbox.Spec{}); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "cordon-test-none") {
		t.Fatalf("a missing namespace: %v, want ErrUnavailable naming it", err)
	}
}

// TestAdoptAndSweep: pods outlive the backend that made them; a later one
// (a restarted daemon) takes one back by its state and token, and sweeps
// the other with its secret and policy.
func TestAdoptAndSweep(t *testing.T) {
	b := backend(t)
	cfg := configFor(t, "test-adopt")
	cfg.Detached = true
	first := kubernetes.New(cfg)
	p := sandbox.NewProvider([]sandbox.Backend{first})
	kept, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(t.Context(), sandbox.Spec{}); err != nil { // left for the sweep
		t.Fatal(err)
	}
	ad, err := kept.Persist()
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := sh(t, kept, "echo before > /workspace/mark; echo ok"); out != "ok\n" {
		t.Fatalf("before: %q", out)
	}
	first.Close()
	_ = b

	second := kubernetes.New(cfg)
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
	if got := objects(t, "test-adopt"); strings.Count(got, "\n") != 2 {
		t.Fatalf("after the sweep: %q, want the adopted sandbox's three objects", got)
	}
	if err := back.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := objects(t, "test-adopt"); got != "" {
		t.Fatalf("left: %s", got)
	}
}

// TestPodDeleted: a pod deleted behind the tier's back (an operator, an
// eviction) ends its sandbox: the host sees the agent gone, not a hang.
func TestPodDeleted(t *testing.T) {
	b := backend(t)
	sb := create(t, b, sandbox.Spec{})
	k := testutil.Cluster(t)
	name := strings.TrimPrefix(k.Kubectl(t, "get", "pods", "-l", kubernetes.LabelOwner+"="+owner(t), "-o", "name"), "pod/")
	k.Kubectl(t, "delete", "pod", name, "--wait=false")
	select {
	case <-sb.Exited():
	case <-t.Context().Done():
		t.Fatal("the sandbox did not end with its pod")
	}
}

func creator(b *kubernetes.Backend) adversarial.Create {
	return func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox { return create(t, b, spec) }
}

// TestLimits: memory and CPU limits hold as on the other tiers (a pids
// limit is refused: a pod has none of its own).
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

// TestPersistentWorkspace: a sandbox with a persistent workspace is
// suspended (its pod gone, its claim kept, work refused as suspended) and
// resumed on a new pod with a new boot identity and the workspace as it
// was; destroyed, nothing of it is left, claim included. A tier without
// the ability refuses the spec.
func TestPersistentWorkspace(t *testing.T) {
	k := testutil.Cluster(t)
	k.Volume(t, "pv-"+owner(t))
	cfg := configFor(t, owner(t))
	cfg.StorageClass = testutil.VolumeClass
	b := kubernetes.New(cfg)
	defer b.Close()
	p := sandbox.NewProvider([]sandbox.Backend{b})
	sb, err := p.Create(t.Context(), sandbox.Spec{PersistentWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	if out, _ := sh(t, sb, "echo kept > /workspace/mark; stat -c '%a %u' /workspace; sleep 600 &"); out != "755 1000\n" {
		t.Fatalf("the workspace: %q", out)
	}
	boot := sb.BootID()
	if err := sb.Suspend(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := objects(t, owner(t)); strings.Contains(got, "pod/") || strings.Count(got, "\n") != 1 {
		t.Fatalf("suspended: %q, want the secret and the policy, no pod", got)
	}
	if claim := k.Kubectl(t, "get", "pvc", "-l", kubernetes.LabelOwner+"="+owner(t), "-o", "name"); claim == "" {
		t.Fatal("the claim is gone with the suspension")
	}
	if _, err := sb.Exec(t.Context(), "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrSuspended) {
		t.Fatalf("exec while suspended: %v, want ErrSuspended", err)
	}
	select {
	case <-sb.Exited():
		t.Fatal("a suspension was taken for the agent's exit")
	default:
	}
	if err := sb.Resume(t.Context()); err != nil {
		t.Fatalf("resume: %v; the agent said: %s", err, sb.Diagnostics())
	}
	if sb.BootID() == boot || sb.BootID() == "" {
		t.Fatalf("boot id %q after resuming, was %q", sb.BootID(), boot)
	}
	if out, _ := sh(t, sb, "cat /workspace/mark; pgrep -c sleep || true"); out != "kept\n0\n" {
		t.Fatalf("after resuming: %q, want the file kept and nothing of before running", out)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := objects(t, owner(t)) + k.Kubectl(t, "get", "pvc", "-l", kubernetes.LabelOwner+"="+owner(t), "-o", "name"); got != "" {
		t.Fatalf("left after Destroy: %s", got)
	}
	// A tier without persistent workspaces refuses one.
	var u *sandbox.UnsupportedError
	if !errors.As(sandbox.Capabilities{}.Check("none", &sandbox.Spec{PersistentWorkspace: true}), &u) {
		t.Fatal("a spec asking for a persistent workspace passes a tier without them")
	}
}

// TestRuntimeClass: a sandbox's pod runs under the RuntimeClass its spec
// names (here one of the test cluster's, on runc: the cluster's gVisor
// needs a containerd newer than Debian's); one the cluster has not is the
// caller's mistake, said as such, and leaves nothing behind.
func TestRuntimeClass(t *testing.T) {
	k := testutil.Cluster(t)
	apply := k.Command("kubectl", "apply", "-f", "-")
	apply.Stdin = strings.NewReader("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: cordon-test-runc}\nhandler: runc\n")
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("the runtime class: %v: %s", err, out)
	}
	b := backend(t)
	sb := create(t, b, sandbox.Spec{RuntimeClass: "cordon-test-runc"})
	if out, _ := sh(t, sb, "id -un"); out != "sandbox\n" {
		t.Fatalf("under the runtime class: %q", out)
	}
	if got := k.Kubectl(t, "get", "pods", "-l", kubernetes.LabelOwner+"="+owner(t), "-o", "jsonpath={.items[*].spec.runtimeClassName}"); got != "cordon-test-runc" {
		t.Fatalf("the pod's runtime class: %q", got)
	}
	p := sandbox.NewProvider([]sandbox.Backend{b})
	if _, err := p.Create(t.Context(), sandbox.Spec{RuntimeClass: "cordon-test-none"}); !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "cordon-test-none") {
		t.Fatalf("a runtime class the cluster has not: %v, want ErrInvalidSpec naming it", err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := objects(t, owner(t)); got != "" {
		t.Fatalf("left: %s", got)
	}
	// Another tier refuses the field rather than ignore it.
	var u *sandbox.UnsupportedError
	if !errors.As(sandbox.Capabilities{}.Check("none", &sandbox.Spec{RuntimeClass: "gvisor"}), &u) {
		t.Fatal("a runtime class passes a tier without them")
	}
}
