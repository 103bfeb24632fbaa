package main_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/mounted"
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

// kubeDaemon is a daemon socket's path, and how to start the daemon on
// it (again) inside the cluster's network namespace, driving the cluster
// with the test's images and flags.
func kubeDaemon(t *testing.T, k *testutil.Kube, flags ...string) (string, func() *serveProc) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cordon-serve-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mounted.Remove(dir); err != nil {
			t.Errorf("removing the daemon's directory: %v", err)
		}
	})
	sock := filepath.Join(dir, "cordon.sock")
	return sock, func() *serveProc {
		return kubeServe(t, k, sock, filepath.Join(dir, "state"), filepath.Join(dir, "process"), flags...)
	}
}

// kubeServe starts a daemon on sock with its registry in state and its
// sandboxes' directory in processDir, inside the cluster's network
// namespace, driving the cluster with the test's images and flags.
func kubeServe(t *testing.T, k *testutil.Kube, sock, state, processDir string, flags ...string) *serveProc {
	t.Helper()
	agent, image := k.Images(t)
	cmd := k.Command(buildCLI(t), append([]string{"serve", "--listen", "unix://" + sock, "--state-dir", state,
		"--kubeconfig", k.Kubeconfig(), "--kube-image", image, "--kube-agent-image", agent, "--kube-network-policy"}, flags...)...)
	return startServeCmd(t, sock, cmd, processDir)
}

// kubeSandbox makes a sandbox on the kubernetes tier through the daemon d
// listening at sock, and returns a client of the daemon and the sandbox;
// where that fails, it stops d and the test.
func kubeSandbox(t *testing.T, sock string, d *serveProc) (*sclient.Client, *api.Sandbox) {
	t.Helper()
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Tier: "kubernetes"}})
	if err != nil {
		d.stop(t, sock)
		t.Fatal(err)
	}
	return c, sb
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
	sock, serve := kubeDaemon(t, k)
	d := serve()
	host := "--host=unix://" + sock
	c, sb := kubeSandbox(t, sock, d)
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
	// Its metrics: the agent counts the pod's memory from its cgroup, the
	// node being no business of the daemon's.
	var stats []struct {
		ID string `json:"id"`
		api.Metrics
	}
	if out, errOut, code := cordon(t, "stats", host, "-o", "json", "--interval", "100ms", sb.ID); code != 0 || json.Unmarshal([]byte(out), &stats) != nil || len(stats) != 1 ||
		stats[0].MemoryBytes == nil || *stats[0].MemoryBytes <= 0 || stats[0].DiskTotalBytes <= 0 || stats[0].OOMKills == nil {
		t.Errorf("stats: exit %d, %q, %s", code, out, errOut)
	}
	_, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Tier: "kubernetes", Image: "cordon-test.invalid/none:1"}})
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

// TestDeployKubernetes: deploy/kubernetes/cordon.yaml, applied as an
// operator would (with the test's images), runs the daemon in the
// cluster under its least-privilege Role, with the pod's service account
// as its credential: a sandbox made through its REST API runs a command
// and is removed with nothing left.
func TestDeployKubernetes(t *testing.T) {
	k, _ := kubeEnv(t)
	agent, image := k.Images(t)
	// The daemon's image holds the full build alone, as
	// deploy/kubernetes/Dockerfile.cordon makes it.
	daemon := k.ImportProgram(t, "cordon.test/cordon", filepath.Join(filepath.Dir(buildCLI(t)), "cordon-full"), "cordon")
	raw, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "deploy", "kubernetes", "cordon.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer(
		"ghcr.io/cordon-sandbox/cordon:latest", daemon,
		"ghcr.io/cordon-sandbox/cordon-agent:latest", agent,
		"        - --kube-network-policy\n", "        - --kube-network-policy\n        - --kube-image="+image+"\n",
		// The test cluster has no service proxy: the API server's own
		// address stands for its service's.
		"        env: []\n", "        env:\n        - {name: KUBERNETES_SERVICE_HOST, value: 192.0.2.10}\n        - {name: KUBERNETES_SERVICE_PORT, value: \"6443\"}\n",
	).Replace(string(raw))
	if !strings.Contains(manifest, daemon) || !strings.Contains(manifest, "192.0.2.10") {
		t.Fatal("the manifest no longer has what the test replaces")
	}
	apply := k.Command("kubectl", "apply", "-f", "-")
	apply.Stdin = strings.NewReader(manifest)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() {
		del := k.Command("kubectl", "delete", "--wait=false", "-f", "-")
		del.Stdin = strings.NewReader(manifest)
		_ = del.Run()
	})
	key := "test-admin-key-0123456789abcdef0123456789"
	k.Kubectl(t, "-n", "cordon-system", "create", "secret", "generic", "cordon-admin-key", "--from-literal=key="+key)
	if out, err := k.Command("kubectl", "-n", "cordon-system", "rollout", "status", "deployment/cordon", "--timeout=120s").CombinedOutput(); err != nil {
		logs, _ := k.Command("kubectl", "-n", "cordon-system", "logs", "deployment/cordon").CombinedOutput()
		t.Fatalf("the daemon did not come up: %v: %s\n%s", err, out, logs)
	}
	ip := k.Kubectl(t, "-n", "cordon-system", "get", "pods", "-l", "app=cordon", "-o", "jsonpath={.items[0].status.podIP}")
	// The CLI reaches the daemon from the cluster's network namespace.
	cli := func(args ...string) (string, string, int) {
		cmd := k.Command(buildCLI(t), args...)
		cmd.Env = append(os.Environ(), "CORDON_API_KEY="+key)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	host := "--host=tcp://" + ip + ":8080"
	out, errOut, code := cli("run", host, "--tier", "kubernetes", "--", "sh", "-c", "id -un; echo in the cluster")
	if code != 0 || out != "sandbox\nin the cluster\n" {
		logs, _ := k.Command("kubectl", "-n", "cordon-system", "logs", "deployment/cordon").CombinedOutput()
		prev, _ := k.Command("kubectl", "-n", "cordon-system", "logs", "--previous", "deployment/cordon").CombinedOutput()
		t.Fatalf("cordon run through the deployed daemon: exit %d, %q, %s\n%s\nbefore its restart:\n%s", code, out, errOut, logs, prev)
	}
	// A sandbox's agent admits the daemon's pods alone: a pod elsewhere in
	// the cluster cannot connect to it, though it can to the daemon.
	id, errOut, code := cli("create", host, "--tier", "kubernetes")
	if code != 0 {
		t.Fatalf("create: exit %d, %s", code, errOut)
	}
	sandboxIP := k.Kubectl(t, "-n", "cordon-sandboxes", "get", "pods", "-o", "jsonpath={.items[0].status.podIP}")
	probe := "probe-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	k.Kubectl(t, "run", probe, "--image="+image, "--restart=Never", "--command", "--", "sh", "-c",
		"for a in "+ip+":8080 "+sandboxIP+":2024; do timeout 3 bash -c \"echo > /dev/tcp/${a%:*}/${a#*:}\" 2>/dev/null && echo $a open || echo $a closed; done")
	t.Cleanup(func() { _ = k.Command("kubectl", "delete", "pod", probe, "--wait=false").Run() })
	k.Kubectl(t, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/"+probe, "--timeout=60s")
	if got := k.Kubectl(t, "logs", probe); got != ip+":8080 open\n"+sandboxIP+":2024 closed" {
		t.Fatalf("from another pod: %q, want the daemon open and the agent closed", got)
	}
	if _, errOut, code := cli("rm", host, strings.TrimSpace(id)); code != 0 {
		t.Fatalf("rm: exit %d, %s", code, errOut)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left := k.Kubectl(t, "-n", "cordon-sandboxes", "get", "pods,secrets,networkpolicies", "-o", "name")
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left in cordon-sandboxes: %s", left)
		}
	}
}

// TestDaemonKubernetesSuspend: through the daemon's REST API and the CLI's
// verbs, a sandbox with a persistent workspace is suspended (its pod
// gone, work on it a 409), survives a daemon killed with SIGKILL as
// suspended, and resumes on a new pod with its workspace as it was; rm
// removes its claim with it.
func TestDaemonKubernetesSuspend(t *testing.T) {
	k, _ := kubeEnv(t)
	k.Volume(t, "pv-daemon-suspend")
	sock, serve := kubeDaemon(t, k, "--kube-storage-class", testutil.VolumeClass)
	d := serve()
	host := "--host=unix://" + sock
	id, errOut, code := cordon(t, "create", host, "--tier", "kubernetes", "--persistent-workspace")
	id = strings.TrimSpace(id)
	if code != 0 {
		d.stop(t, sock)
		t.Fatalf("create: exit %d, %s", code, errOut)
	}
	if _, errOut, code := cordon(t, "exec", host, id, "--", "sh", "-c", "echo kept > /workspace/mark"); code != 0 {
		d.stop(t, sock)
		t.Fatalf("exec: exit %d, %s", code, errOut)
	}
	if _, errOut, code := cordon(t, "suspend", host, id); code != 0 {
		d.stop(t, sock)
		t.Fatalf("suspend: exit %d, %s", code, errOut)
	}
	if pods := k.Kubectl(t, "get", "pods", "-l", "dev.cordon.tier=kubernetes", "-o", "name"); pods != "" {
		d.stop(t, sock)
		t.Fatalf("pods of a suspended sandbox: %s", pods)
	}
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	var ae *api.Error
	if _, err := c.Exec(t.Context(), id, "true", sclient.ExecOptions{}); !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != api.CodeSuspended {
		d.stop(t, sock)
		t.Fatalf("exec while suspended: %v, want a 409 suspended", err)
	}
	d.kill9()
	d = serve()
	defer d.stop(t, sock)
	if sb, err := c.Get(t.Context(), id); err != nil || sb.State != api.StateSuspended {
		t.Fatalf("after the restart: %+v %v, want it suspended", sb, err)
	}
	if _, errOut, code := cordon(t, "resume", host, id); code != 0 {
		t.Fatalf("resume: exit %d, %s", code, errOut)
	}
	if out, errOut, code := cordon(t, "exec", host, id, "--", "cat", "/workspace/mark"); code != 0 || out != "kept\n" {
		t.Fatalf("after resuming: exit %d, %q, %s", code, out, errOut)
	}
	if _, errOut, code := cordon(t, "rm", host, id); code != 0 {
		t.Fatalf("rm: exit %d, %s", code, errOut)
	}
	if left := k.Kubectl(t, "get", "pods,secrets,networkpolicies,pvc", "-l", "dev.cordon.tier=kubernetes", "-o", "name"); left != "" {
		t.Fatalf("left after rm: %s", left)
	}
}

// TestDaemonKubernetesEphemeralKilled: a private daemon (cordon serve
// --ephemeral, as cordon mcp starts one) killed with SIGKILL leaves its
// pods running, for a cluster has no lifeline; the next private daemon on
// its directory (as the next cordon mcp takes over a killed one's) takes
// them back, and its own stop removes them: nothing of the killed
// daemon's stays in the cluster.
func TestDaemonKubernetesEphemeralKilled(t *testing.T) {
	k, _ := kubeEnv(t)
	sock, serve := kubeDaemon(t, k, "--ephemeral")
	d := serve()
	// The daemon's pods carry its owner label, its registry's id.
	owned := "dev.cordon.owner=cordon-daemon-" + registryID(t, filepath.Join(filepath.Dir(sock), "state"))
	_, sb := kubeSandbox(t, sock, d)
	host := "--host=unix://" + sock
	if out, errOut, code := cordon(t, "exec", host, sb.ID, "--", "sh", "-c", "echo kept > /workspace/mark; echo ok"); code != 0 || out != "ok\n" {
		d.stop(t, sock)
		t.Fatalf("exec: exit %d, %q, %s", code, out, errOut)
	}
	d.kill9()
	if pods := k.Kubectl(t, "get", "pods", "-l", owned, "-o", "name"); pods == "" {
		t.Fatal("the killed daemon's pod is gone before anything removed it")
	}
	d = serve()
	if out, errOut, code := cordon(t, "exec", host, sb.ID, "--", "cat", "/workspace/mark"); code != 0 || out != "kept\n" {
		d.stop(t, sock)
		t.Fatalf("the next daemon's exec: exit %d, %q, %s", code, out, errOut)
	}
	// Stopped as cordon mcp stops its daemon, without deleting anything
	// first.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("the daemon's stop: %v\n%s", err, d.out.String())
	}
	if left := k.Kubectl(t, "get", "pods,secrets,networkpolicies,persistentvolumeclaims", "-l", owned, "-o", "name"); left != "" {
		t.Fatalf("left in the cluster after the private daemon stopped: %s\ndaemon said:\n%s", left, d.out.String())
	}
}

// registryID is the id of the daemon whose registry is in state.
func registryID(t *testing.T, state string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "owner"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestDaemonKubernetesOwners: daemons on different hosts may share a
// cluster, and their sandboxes' directories may have the same path there
// (the default, /run/cordon/serve). A daemon's pods were labelled by that
// path, so the next daemon to start removed every pod of every other
// daemon as not its registry's. They are labelled by the registry's own
// id now: here a second daemon with a registry of its own, on a directory
// of the same path (the first one's, left to it: what another host's
// would be), starts, and the first one's sandbox lives on; and pods a
// daemon labelled by the path before are still its own to take back.
func TestDaemonKubernetesOwners(t *testing.T) {
	k, _ := kubeEnv(t)
	sock, serve := kubeDaemon(t, k)
	dir := filepath.Dir(sock)
	d := serve()
	_, sb := kubeSandbox(t, sock, d)
	host := "--host=unix://" + sock
	if out, errOut, code := cordon(t, "exec", host, sb.ID, "--", "sh", "-c", "echo kept > /workspace/mark; echo ok"); code != 0 || out != "ok\n" {
		d.stop(t, sock)
		t.Fatalf("exec: exit %d, %q, %s", code, out, errOut)
	}
	// Stopped: its sandboxes stay. The directory is given up, as on
	// another host it would never have been claimed.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	processDir := filepath.Join(dir, "process")
	if err := os.Remove(filepath.Join(processDir, "serve", ".serve.lock")); err != nil {
		t.Fatal(err)
	}
	other := kubeServe(t, k, filepath.Join(dir, "other.sock"), filepath.Join(dir, "other"), processDir)
	if _, err := sclient.New("unix://"+filepath.Join(dir, "other.sock"), ""); err != nil {
		t.Fatal(err)
	}
	other.stop(t, filepath.Join(dir, "other.sock"))
	owned := "dev.cordon.owner=cordon-daemon-" + registryID(t, filepath.Join(dir, "state"))
	if pods := k.Kubectl(t, "get", "pods", "-l", owned, "-o", "name"); !strings.Contains(pods, "pod/") {
		t.Fatalf("another daemon's start removed the first one's pod: %q", pods)
	}
	// Labelled as the daemon labelled its pods before, by its
	// directory's path: still its own.
	sum := sha256.Sum256([]byte(filepath.Join(processDir, "serve")))
	k.Kubectl(t, "label", "pods", "-l", owned, "--overwrite", "dev.cordon.owner=cordon-daemon-"+hex.EncodeToString(sum[:6]))
	os.Remove(filepath.Join(processDir, "serve", ".serve.lock"))
	d = serve()
	defer d.stop(t, sock)
	if out, errOut, code := cordon(t, "exec", host, sb.ID, "--", "cat", "/workspace/mark"); code != 0 || out != "kept\n" {
		t.Fatalf("the first daemon, back: exit %d, %q, %s", code, out, errOut)
	}
}
