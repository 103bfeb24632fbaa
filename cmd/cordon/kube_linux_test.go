package main_test

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// kubeEnv points cordon at the test binary's cluster (reached from inside
// its network namespace, where scripts/k8s-cluster exec runs cordon) and
// its images, for the kubernetes tier.
func kubeEnv(t testing.TB) (*testutil.Kube, []string) {
	t.Helper()
	k := testutil.Cluster(t)
	agent, image := k.Images(t)
	return k, []string{"CORDON_KUBE_IMAGE=" + image, "CORDON_KUBE_AGENT_IMAGE=" + agent, "CORDON_KUBE_NETWORK_POLICY=enforced"}
}

// TestRunKubernetes: cordon run on the kubernetes tier, as a user types
// it with KUBECONFIG set: the command runs in a pod as the sandbox user,
// with its exit status and output; a missing image is the user's
// mistake; no pod is left after; and without the operator's word that the
// cluster enforces network policy the tier refuses, saying so.
func TestRunKubernetes(t *testing.T) {
	k, env := kubeEnv(t)
	run := func(env []string, args ...string) (string, string, int) {
		t.Helper()
		cmd := k.Command(buildCLI(t), append([]string{"run", "--tier", "kubernetes"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	out, errOut, code := run(env, "--", "sh", "-c", "id -un; hostname; echo $HOME; exit 7")
	if code != 7 || out != "sandbox\ncordon\n/home/sandbox\n" {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
	out, errOut, code = run(env, "--memory", "64m", "--", "python3", "-c", "a = bytearray(512 << 20)")
	if code == 0 || !strings.Contains(errOut, "memory") {
		t.Fatalf("a memory hog: exit %d, %q, %s", code, out, errOut)
	}
	_, errOut, code = run(env, "--image", "cordon-test.invalid/none:1", "--", "true")
	if code != 125 || !strings.Contains(errOut, "cordon-test.invalid/none:1") {
		t.Fatalf("a missing image: exit %d, %s", code, errOut)
	}
	_, errOut, code = run(env[:2], "--", "true")
	if code != 125 || !strings.Contains(errOut, "NetworkPolicy") {
		t.Fatalf("without enforced network policy: exit %d, %s", code, errOut)
	}
	if left := k.Kubectl(t, "get", "pods,secrets,networkpolicies", "-l", "dev.cordon.owner=cordon-run", "-o", "name"); left != "" {
		t.Fatalf("left after cordon run: %s", left)
	}
}

// TestDaemonKubernetes: cordon serve --kubeconfig makes kubernetes a tier
// of the REST API: a sandbox made there runs commands through the CLI's
// verbs, outlives a daemon killed with SIGKILL and is taken back by the
// next one; an image the cluster cannot pull is a 400; and removal leaves
// nothing of the daemon's in the cluster.
func TestDaemonKubernetes(t *testing.T) {
	k, _ := kubeEnv(t)
	dir, err := os.MkdirTemp("", "cordon-serve-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "cordon.sock")
	agent, image := k.Images(t)
	serve := func() *serveProc {
		cmd := k.Command(buildCLI(t), "serve", "--listen", "unix://"+sock, "--state-dir", filepath.Join(dir, "state"),
			"--kubeconfig", k.Kubeconfig(), "--kube-image", image, "--kube-agent-image", agent, "--kube-network-policy")
		return startServeCmd(t, sock, cmd, filepath.Join(dir, "process"))
	}
	d := serve()
	host := "--host=unix://" + sock
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Tier: "kubernetes"}})
	if err != nil {
		d.stop(t, sock)
		t.Fatal(err)
	}
	if out, errOut, code := cordon(t, "exec", host, sb.ID, "--", "sh", "-c", "id -un; hostname; echo kept > /workspace/mark"); code != 0 || out != "sandbox\ncordon\n" {
		d.stop(t, sock)
		t.Fatalf("exec: exit %d, %q, %s", code, out, errOut)
	}
	d.kill9()
	d = serve()
	defer d.stop(t, sock)
	if out, errOut, code := cordon(t, "exec", host, sb.ID, "--", "cat", "/workspace/mark"); code != 0 || out != "kept\n" {
		t.Fatalf("after the restart: exit %d, %q, %s", code, out, errOut)
	}
	_, err = c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Tier: "kubernetes", Image: "cordon-test.invalid/none:1"}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Fatalf("a missing image: %v, want a 400", err)
	}
	if _, errOut, code := cordon(t, "rm", host, sb.ID); code != 0 {
		t.Fatalf("rm: exit %d, %s", code, errOut)
	}
	if left := k.Kubectl(t, "get", "pods,secrets,networkpolicies", "-l", "dev.cordon.tier=kubernetes", "-o", "name"); left != "" {
		t.Fatalf("left after rm: %s", left)
	}
}
