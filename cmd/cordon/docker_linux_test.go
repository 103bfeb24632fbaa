package main_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// TestRunDocker: cordon run on the docker tier, as a user types it: the
// command runs in a container of the engine DOCKER_HOST names, as the
// sandbox user, with its exit status, its limits held, and no container
// left after; a missing image is the user's mistake; a killed cordon
// run's container is swept by the next; the agent copies and account
// files that earlier runs left unused for ten minutes go.
func TestRunDocker(t *testing.T) {
	env := append(os.Environ(), dockerEnv(t)...)
	d := testutil.Engine(t)
	state := t.TempDir()
	env = append(env, "CORDON_STATE_DIR="+state)
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(buildCLI(t), append([]string{"run", "--tier", "docker"}, args...)...)
		cmd.Env = env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	owned := func() string {
		return d.Docker(t, "ps", "-aq", "--filter", "label=dev.cordon.owner=cordon-run")
	}
	// What earlier runs left for containers to bind, unused for an hour.
	staleAgent, staleAccounts := plantShared(t, filepath.Join(state, "docker"), "agent"), plantShared(t, filepath.Join(state, "docker"), "accounts")
	out, errOut, code := run("--", "sh", "-c", "id -un; hostname; echo $HOME; exit 7")
	if code != 7 || out != "sandbox\ncordon\n/home/sandbox\n" {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
	checkPruned(t, staleAgent)
	checkPruned(t, staleAccounts)
	// Forks stop at the pids limit: the workload's tasks, exactly.
	out, errOut, code = run("--pids", "20", "--", "python3", "-c", `import os, time
n = 0
for i in range(40):
    try:
        if os.fork() == 0:
            time.sleep(3); os._exit(0)
        n += 1
    except OSError:
        break
print(n)`)
	if n, err := strconv.Atoi(strings.TrimSpace(out)); code != 0 || err != nil || n >= 20 || n < 10 {
		t.Fatalf("forks under a pids limit of 20: exit %d, %q, %s", code, out, errOut)
	}
	if ids := owned(); ids != "" {
		t.Fatalf("containers left after cordon run: %s", ids)
	}
	_, errOut, code = run("--image", "cordon-test.invalid/none:1", "--", "true")
	if code != 125 || !strings.Contains(errOut, "cannot be pulled") {
		t.Fatalf("a missing image: exit %d, %s", code, errOut)
	}
	// Killed while its command runs: the agent's lifeline closes, the
	// container stops, and the next cordon run removes it.
	cmd := exec.Command(buildCLI(t), "run", "--tier", "docker", "--", "sleep", "60")
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); owned() == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no container came up")
		}
	}
	time.Sleep(500 * time.Millisecond) // its command started
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if _, errOut, code := run("--", "true"); code != 0 {
		t.Fatalf("the next run: exit %d, %s", code, errOut)
	}
	if ids := owned(); ids != "" {
		t.Fatalf("the killed run's container was not swept: %s", ids)
	}
}

// dockerEnv points cordon at the test binary's private Docker engine and
// its image, for the docker tier.
func dockerEnv(t testing.TB) []string {
	t.Helper()
	d := testutil.Engine(t)
	return []string{"DOCKER_HOST=" + d.Host, "CORDON_DOCKER_IMAGE=" + testutil.EngineImage}
}

// TestDaemonDocker: the daemon offers the docker tier through its REST
// API and CLI verbs; a sandbox there outlives a daemon killed with
// SIGKILL and is taken back by the next one; an image the engine cannot
// have is a 400; and removal leaves no container of the daemon's.
func TestDaemonDocker(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, kv := range dockerEnv(t) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	engine := testutil.Engine(t)
	dir, sock, d := serveInTemp(t)
	host := "--host=unix://" + sock
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Tier: "docker"}})
	if err != nil {
		d.stop(t, sock)
		t.Fatal(err)
	}
	if out, errOut, code := cordon(t, "exec", host, sb.ID, "--", "sh", "-c", "id -un; cat /etc/hostname; echo kept > /workspace/mark"); code != 0 || out != "sandbox\ncordon\n" {
		d.stop(t, sock)
		t.Fatalf("exec: exit %d, %q, %s", code, out, errOut)
	}
	d.kill9()
	d = startServe(t, sock, filepath.Join(dir, "state"), filepath.Join(dir, "process"))
	defer d.stop(t, sock)
	if out, errOut, code := cordon(t, "exec", host, sb.ID, "--", "cat", "/workspace/mark"); code != 0 || out != "kept\n" {
		t.Fatalf("after the restart: exit %d, %q, %s", code, out, errOut)
	}
	_, err = c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Tier: "docker", Image: "cordon-test.invalid/none:1"}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Fatalf("a missing image: %v, want a 400", err)
	}
	if _, errOut, code := cordon(t, "rm", host, sb.ID); code != 0 {
		t.Fatalf("rm: exit %d, %s", code, errOut)
	}
	if ids := engine.Docker(t, "ps", "-aq", "--filter", "label=dev.cordon.tier=docker"); ids != "" {
		t.Fatalf("containers left after rm: %s", ids)
	}
}

// TestImageImportDocker: cordon image import --tier docker loads a docker
// save tarball into the engine's store, where a sandbox then runs on it.
func TestImageImportDocker(t *testing.T) {
	testutil.RequiresRoot(t)
	env := append(os.Environ(), dockerEnv(t)...)
	d := testutil.Engine(t)
	d.Docker(t, "tag", testutil.EngineImage, "cordon-test/loaded:1")
	tarball := filepath.Join(t.TempDir(), "image.tar")
	d.Docker(t, "save", "-o", tarball, "cordon-test/loaded:1")
	d.Docker(t, "rmi", "cordon-test/loaded:1")
	cmd := exec.Command(buildCLI(t), "image", "import", "--tier", "docker", tarball)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cordon-test/loaded:1") {
		t.Fatalf("import: %v: %s", err, out)
	}
	cmd = exec.Command(buildCLI(t), "run", "--tier", "docker", "--image", "cordon-test/loaded:1", "--", "echo", "on the loaded image")
	cmd.Env = append(env, "CORDON_STATE_DIR="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "on the loaded image\n" {
		t.Fatalf("run: %v: %s", err, out)
	}
}

// TestDaemonDockerEngineGone: when the engine goes away under a sandbox,
// the daemon never records it destroyed before the engine has removed it:
// the failed removal leaves a record in "destroying" with its error, and
// once the engine is back the reaper's retry removes the container.
func TestDaemonDockerEngineGone(t *testing.T) {
	testutil.RequiresRoot(t)
	engine := testutil.StartDockerd()
	defer engine.Stop()
	host := engine.Require(t)
	engine.ImportRoot(t, testutil.DebianTools(t), testutil.EngineImage)
	t.Setenv("DOCKER_HOST", host)
	t.Setenv("CORDON_DOCKER_IMAGE", testutil.EngineImage)
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Tier: "docker"}})
	if err != nil {
		t.Fatal(err)
	}
	engine.Halt()
	// The removal cannot be confirmed while the engine is gone.
	if err := c.Delete(t.Context(), sb.ID); err == nil {
		t.Fatal("the sandbox was reported deleted with its engine down")
	}
	got, err := c.Get(t.Context(), sb.ID)
	if err != nil || got.State != api.StateDestroying {
		t.Fatalf("with the engine down: %+v %v", got, err)
	}
	engine.Restart(t)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got, err = c.Get(t.Context(), sb.ID)
		if err == nil && got.State == api.StateDestroyed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reaper never finished the teardown: %+v %v", got, err)
		}
	}
	if ids := engine.Docker(t, "ps", "-aq", "--filter", "label=dev.cordon.tier=docker"); ids != "" {
		t.Fatalf("containers left: %s", ids)
	}
}

// TestRunDockerContext: with no DOCKER_HOST, cordon finds the engine of
// the docker CLI's current context, as docker does.
func TestRunDockerContext(t *testing.T) {
	d := testutil.Engine(t)
	config := t.TempDir()
	sum := sha256.Sum256([]byte("cordon-test"))
	meta := filepath.Join(config, "contexts", "meta", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(meta, "meta.json"), []byte(`{"Name":"cordon-test","Endpoints":{"docker":{"Host":"`+d.Host+`"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(config, "config.json"), []byte(`{"currentContext":"cordon-test"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_HOST=") && !strings.HasPrefix(kv, "DOCKER_CONTEXT=") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(buildCLI(t), "run", "--tier", "docker", "--", "echo", "through the context")
	cmd.Env = append(env, "DOCKER_CONFIG="+config, "CORDON_DOCKER_IMAGE="+testutil.EngineImage, "CORDON_STATE_DIR="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "through the context\n" {
		t.Fatalf("%v: %s", err, out)
	}
}

// TestDockerTierBounds: where the engine manages cgroups itself, a docker
// sandbox is made below the container tiers' shared cgroup, whose bounds
// (host.TierTasks, host.TierMemory) hold all of them together, and which
// the tier sets where nobody has: without them a tenant's docker
// sandboxes could take every task id of the host, as they could on the
// other tiers before.
func TestDockerTierBounds(t *testing.T) {
	testutil.RequiresRoot(t)
	env := append(os.Environ(), dockerEnv(t)...)
	d := testutil.Engine(t)
	env = append(env, "CORDON_STATE_DIR="+t.TempDir())
	files := map[string]struct{ unbounded, want string }{
		"/sys/fs/cgroup/pids/" + host.ContainersCgroup + "/pids.max":                {"max", fmt.Sprint(host.TierTasks())},
		"/sys/fs/cgroup/memory/" + host.ContainersCgroup + "/memory.limit_in_bytes": {"-1", fmt.Sprint(host.TierMemory())},
	}
	for f, v := range files {
		// Unbounded for a moment, as on a host cordon never ran on.
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, []byte(v.unbounded), 0); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(f, []byte(v.want), 0)
	}
	cmd := exec.Command(buildCLI(t), "run", "--tier", "docker", "--", "sleep", "60")
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	var id string
	for deadline := time.Now().Add(30 * time.Second); id == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no container came up")
		}
		id = strings.TrimSpace(d.Docker(t, "ps", "-q", "--no-trunc", "--filter", "label=dev.cordon.owner=cordon-run"))
	}
	for f, v := range files {
		if got, _ := os.ReadFile(f); strings.TrimSpace(string(got)) != v.want {
			t.Errorf("%s after a docker sandbox: %q, want %s", f, got, v.want)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(f), id)); err != nil {
			t.Errorf("the sandbox's cgroup is not below %s: %v", filepath.Dir(f), err)
		}
	}
}
