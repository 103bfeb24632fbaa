//go:build linux

package kubernetes_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/kubernetes"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
)

// The tests run inside the test cluster's network namespace, where the
// pods' addresses are (testutil.RunInKube).
func TestMain(m *testing.M) {
	code := testutil.RunInKube(m.Run)
	testutil.StopCluster()
	os.Exit(code)
}

// owner is a label value naming t (a test's own objects).
func owner(t testing.TB) string {
	sum := sha256.Sum256([]byte(t.Name()))
	return "test-" + hex.EncodeToString(sum[:6])
}

func backend(t *testing.T) *kubernetes.Backend { return backendTB(t) }

// configFor is the tier's configuration for the test cluster, its
// objects labelled with owner.
func configFor(t testing.TB, owner string) kubernetes.Config {
	t.Helper()
	k := testutil.Cluster(t)
	agent, image := k.Images(t)
	return kubernetes.Config{Kubeconfig: k.Kubeconfig(), Image: image, AgentImage: agent, NetworkPolicy: true, Owner: owner}
}

func backendTB(t testing.TB) *kubernetes.Backend {
	t.Helper()
	b := kubernetes.New(configFor(t, owner(t)))
	if err := b.Probe(t.Context()); err != nil {
		t.Fatalf("the cluster is up, and the tier is not: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func create(t *testing.T, b *kubernetes.Backend, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	return sandboxtest.Create(t, b, spec)
}

func sh(t *testing.T, sb *sandbox.Sandbox, script string) (string, *sandbox.Result) {
	t.Helper()
	return sandboxtest.Sh(t, sb, script)
}

// TestPod: what the cluster made is what the baseline says, seen from
// inside: the sandbox user with no capabilities, no new privileges, a
// system-call filter, a read-only image, owned and executable scratch, no
// service-account token, and the agent's token out of the workload's
// reach and in no configuration the cluster keeps.
func TestPod(t *testing.T) {
	b := backend(t)
	sb := create(t, b, sandbox.Spec{})
	out, res := sh(t, sb, `id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status;
touch /usr/x 2>&1 | grep -o 'Read-only' ; printf '#!/bin/sh\necho ran\n' > /workspace/x.sh && chmod +x /workspace/x.sh && /workspace/x.sh
stat -c '%n %a %u' /workspace /tmp /home/sandbox; ls /var/run/secrets/kubernetes.io 2>&1; cat /run/cordon-token/token 2>&1 | head -c 200; echo`)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	for _, want := range []string{"1000\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "Read-only", "ran",
		"/workspace 755 1000", "/tmp 1777 0", "/home/sandbox 700 1000", "No such file", "Permission denied"} {
		if !strings.Contains(out, want) {
			t.Errorf("inside, want %q in:\n%s", want, out)
		}
	}
	tok := sb.Client().Endpoint().Token
	if strings.Contains(out, tok) {
		t.Fatal("the workload read the agent's token")
	}
	k := testutil.Cluster(t)
	if spec := k.Kubectl(t, "get", "pods", "-l", kubernetes.LabelOwner+"="+owner(t), "-o", "json"); strings.Contains(spec, tok) {
		t.Fatal("the agent's token is in the pod's spec")
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.FromBackend(backend(t), sandbox.Spec{}))
}

// inImage is the tier with the agent in the sandbox's image
// (Config.AgentInImage): pods without init containers.
func inImage(t testing.TB) *kubernetes.Backend {
	cfg := configFor(t, owner(t))
	cfg.Image, cfg.AgentInImage = testutil.Cluster(t).ImageWithAgent(t), testutil.KubeAgentInImage
	b := kubernetes.New(cfg)
	t.Cleanup(func() { b.Close() })
	return b
}

// TestConformanceAgentInImage: the same behaviour with the agent in the
// image, whose pods have no init container.
func TestConformanceAgentInImage(t *testing.T) {
	b := inImage(t)
	sb := create(t, b, sandbox.Spec{})
	if out, _ := sh(t, sb, "id -un"); out != "sandbox\n" {
		t.Fatalf("the image's own sandbox user: %q", out)
	}
	if got := testutil.Cluster(t).Kubectl(t, "get", "pods", "-l", kubernetes.LabelOwner+"="+owner(t), "-o", "jsonpath={.items[*].spec.initContainers}"); got != "" {
		t.Fatalf("init containers: %s", got)
	}
	conformance.Run(t, conformance.FromBackend(b, sandbox.Spec{}))
}

func TestAdversarial(t *testing.T) {
	b := backend(t)
	adversarial.Run(t, func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox { return create(t, b, spec) })
}

// gvisorSpec is a sandbox on the test cluster's gVisor (RuntimeClass
// gvisor: runsc behind containerd's gVisor shim).
var gvisorSpec = sandbox.Spec{RuntimeClass: "gvisor"}

// TestGVisor: a sandbox whose spec names the RuntimeClass gvisor runs on
// gVisor's kernel, and behaves as every sandbox does (conformance).
func TestGVisor(t *testing.T) {
	b := backend(t)
	sb := create(t, b, gvisorSpec)
	if out, _ := sh(t, sb, "dmesg 2>/dev/null | head -1; cat /proc/version"); !strings.Contains(out, "gVisor") && !strings.Contains(out, "gvisor") {
		t.Fatalf("not on gVisor: %q", out)
	}
	conformance.Run(t, conformance.FromBackend(b, gvisorSpec))
}

// TestAdversarialGVisor: the attacks, on the cluster's gVisor.
func TestAdversarialGVisor(t *testing.T) {
	b := backend(t)
	adversarial.Run(t, func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox {
		spec.RuntimeClass = gvisorSpec.RuntimeClass
		return create(t, b, spec)
	})
}
