package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cordon-sandbox/cordon/baseline"
)

// Kube is a single-node test cluster (scripts/k8s-cluster) for one test
// binary: its own network and mount namespaces, its API server at
// 127.0.0.1:6443 and its pods on 10.244.0.0/24 there, NetworkPolicy
// enforced. Nothing can be pulled on our machines: tests import the images
// they use (Images).
type Kube struct {
	// Dir holds the cluster's state; its admin.kubeconfig reaches it from
	// inside its network namespace.
	Dir string
	// Err says why there is no cluster.
	Err  error
	repo string
	bin  string // scripts/k8s-build's directory
	own  bool   // this process started it (and stops it)

	images struct {
		sync.Once
		agent, debian, withAgent string
		err                      error
	}
}

// EnvKubeDir names the cluster of a test binary re-run inside it
// (RunInKube).
const EnvKubeDir = "CORDON_TEST_KUBE_DIR"

// envKubeWD is the working directory of the run RunInKube re-runs.
const envKubeWD = "CORDON_TEST_KUBE_WD"

// StartKube starts a cluster; Stop it once the tests are done.
func StartKube() *Kube {
	k := &Kube{own: true}
	if os.Geteuid() != 0 {
		k.Err = errors.New("the test cluster needs root")
		return k
	}
	if k.repo, k.Err = repoRoot(); k.Err != nil {
		return k
	}
	for _, p := range []string{"etcd", "ipset", "iptables", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			k.Err = fmt.Errorf("the test cluster needs %s on PATH (scripts/setup.sh installs it)", p)
			return k
		}
	}
	if k.Dir, k.Err = os.MkdirTemp("", "cordon-kube-"); k.Err != nil {
		return k
	}
	// The binaries are built by set-up (scripts/test); a cold build here
	// would take a quarter of an hour.
	if k.bin, k.Err = build(k.repo); k.Err != nil {
		return k
	}
	out, err := exec.Command(filepath.Join(k.repo, "scripts", "k8s-cluster"), "up", k.Dir).CombinedOutput()
	if err != nil {
		k.Err = fmt.Errorf("scripts/k8s-cluster up: %v: %s", err, tail(string(out), 4000))
		k.Stop()
	}
	return k
}

// build is scripts/k8s-build's directory of binaries, built if need be.
func build(repo string) (string, error) {
	cmd := exec.Command(filepath.Join(repo, "scripts", "k8s-build"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/k8s-build: %v: %s", err, tail(stderr.String(), 2000))
	}
	return strings.TrimSpace(string(out)), nil
}

// repoRoot is the directory holding go.mod, above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// Require is the cluster, or t skipped (failed under CI) when there is
// none.
func (k *Kube) Require(t testing.TB) *Kube {
	t.Helper()
	if k.Err != nil {
		Missing(t, "no test cluster: %v", k.Err)
	}
	return k
}

// Kubeconfig is the cluster's administrator's kubeconfig.
func (k *Kube) Kubeconfig() string { return filepath.Join(k.Dir, "admin.kubeconfig") }

// Command is name run inside the cluster's namespaces (kubectl on PATH,
// KUBECONFIG set).
func (k *Kube) Command(name string, args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(k.repo, "scripts", "k8s-cluster"), append([]string{"exec", k.Dir, "--", name}, args...)...)
}

// Kubectl runs kubectl in the cluster and returns its output.
func (k *Kube) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := k.Command("kubectl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Stop stops the cluster, if this process started it, and removes its
// directory.
func (k *Kube) Stop() {
	if !k.own || k.Dir == "" {
		return
	}
	if k.repo != "" {
		_ = exec.Command(filepath.Join(k.repo, "scripts", "k8s-cluster"), "down", k.Dir).Run()
	}
	_ = exec.Command("umount", "-R", "--lazy", filepath.Join(k.Dir, "kubelet")).Run()
	_ = os.RemoveAll(k.Dir)
}

// Images imports, once per binary, the agent's image (this tree's
// cordon-agent at /cordon-agent) and the suites' Debian image, and names
// them.
func (k *Kube) Images(t testing.TB) (agent, debian string) {
	t.Helper()
	k.images.Do(func() {
		defer func() {
			if k.images.err == nil && t.Failed() {
				k.images.err = errors.New("building the images failed")
			}
		}()
		bin := BuildAgent(t)
		sum, err := fileSum(bin)
		if err != nil {
			k.images.err = err
			return
		}
		work := t.TempDir()
		root := filepath.Join(work, "agent")
		if err := os.MkdirAll(root, 0o755); err != nil {
			k.images.err = err
			return
		}
		if out, err := exec.Command("cp", bin, filepath.Join(root, "cordon-agent")).CombinedOutput(); err != nil {
			k.images.err = fmt.Errorf("cp: %v: %s", err, out)
			return
		}
		k.images.agent = "cordon.test/agent:" + sum[:12]
		if k.images.err = k.importRoot(work, root, k.images.agent, []string{"/cordon-agent"}); k.images.err != nil {
			return
		}
		k.images.debian = EngineImage
		if k.images.err = k.importRoot(work, DebianTools(t), k.images.debian, []string{"/bin/sh"}); k.images.err != nil {
			return
		}
		// The Debian image with the agent in it, and the sandbox user.
		over := filepath.Join(work, "over")
		for _, d := range []string{"usr/local/bin", "etc"} {
			if err := os.MkdirAll(filepath.Join(over, d), 0o755); err != nil {
				k.images.err = err
				return
			}
		}
		if out, err := exec.Command("cp", bin, filepath.Join(over, KubeAgentInImage)).CombinedOutput(); err != nil {
			k.images.err = fmt.Errorf("cp: %v: %s", err, out)
			return
		}
		passwd, _ := os.ReadFile(filepath.Join(DebianTools(t), "etc", "passwd"))
		group, _ := os.ReadFile(filepath.Join(DebianTools(t), "etc", "group"))
		p, g := baseline.MergeAccounts(string(passwd), string(group), baseline.DefaultUID)
		if err := errors.Join(os.WriteFile(filepath.Join(over, "etc", "passwd"), []byte(p), 0o644),
			os.WriteFile(filepath.Join(over, "etc", "group"), []byte(g), 0o644)); err != nil {
			k.images.err = err
			return
		}
		k.images.withAgent = "cordon.test/bookworm-agent:" + sum[:12]
		k.images.err = k.importRoot(work, DebianTools(t), k.images.withAgent, []string{"/bin/sh"}, over)
	})
	if k.images.err != nil {
		t.Fatalf("the test cluster's images: %v", k.images.err)
	}
	return k.images.agent, k.images.debian
}

// ImageWithAgent is the suites' Debian image with this tree's cordon-agent
// at KubeAgentInImage and the sandbox user in its accounts (Images makes
// it).
func (k *Kube) ImageWithAgent(t testing.TB) string {
	t.Helper()
	k.Images(t)
	return k.images.withAgent
}

// VolumeClass is the storage class of the volumes Volume makes.
const VolumeClass = "cordon-test"

// Volume makes a 1 GiB volume of class VolumeClass on a directory of t's,
// for one claim to bind, as a cluster's provisioner would (the test
// cluster has none); it is deleted when t ends.
func (k *Kube) Volume(t testing.TB, name string) {
	t.Helper()
	apply := k.Command("kubectl", "apply", "-f", "-")
	apply.Stdin = strings.NewReader(`apiVersion: v1
kind: PersistentVolume
metadata: {name: ` + name + `}
spec:
  storageClassName: ` + VolumeClass + `
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: ` + t.TempDir() + `/volume, type: DirectoryOrCreate}
`)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("the volume %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { _ = k.Command("kubectl", "delete", "pv", name, "--wait=false").Run() })
}

// ImportProgram imports an image holding only the program at path, as
// /name and its entrypoint, named ref plus the program's digest, and
// returns that name.
func (k *Kube) ImportProgram(t testing.TB, ref, path, name string) string {
	t.Helper()
	sum, err := fileSum(path)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	root := filepath.Join(work, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", path, filepath.Join(root, name)).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	ref += ":" + sum[:12]
	if err := k.importRoot(work, root, ref, []string{"/" + name}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// KubeAgentInImage is where ImageWithAgent holds the agent.
const KubeAgentInImage = "/usr/local/bin/cordon-agent"

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// importRoot imports the root filesystem dir into the cluster's
// containerd as image ref (a docker-archive), unless it holds it; more
// directories are layers over it.
func (k *Kube) importRoot(work, dir, ref string, entrypoint []string, more ...string) error {
	sock := filepath.Join(k.Dir, "containerd", "containerd.sock")
	ctr := filepath.Join(k.bin, "containerd", "ctr")
	if out, _ := exec.Command(ctr, "-a", sock, "-n", "k8s.io", "images", "ls", "-q", "name=="+ref).Output(); strings.TrimSpace(string(out)) != "" {
		return nil
	}
	w, err := os.MkdirTemp(work, "image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(w)
	var layers, diffs []string
	for i, d := range append([]string{dir}, more...) {
		name := fmt.Sprintf("layer%d.tar", i)
		if out, err := exec.Command("tar", "-C", d, "--numeric-owner", "-cf", filepath.Join(w, name), ".").CombinedOutput(); err != nil {
			return fmt.Errorf("tar %s: %v: %s", d, err, out)
		}
		sum, err := fileSum(filepath.Join(w, name))
		if err != nil {
			return err
		}
		layers, diffs = append(layers, name), append(diffs, "sha256:"+sum)
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffs},
	})
	cfgSum := sha256.Sum256(config)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	if err := os.WriteFile(filepath.Join(w, cfgName), config, 0o644); err != nil {
		return err
	}
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{ref}, "Layers": layers}})
	if err := os.WriteFile(filepath.Join(w, "manifest.json"), manifest, 0o644); err != nil {
		return err
	}
	archive := filepath.Join(w, "image.tar")
	if out, err := exec.Command("tar", append([]string{"-C", w, "-cf", archive, "manifest.json", cfgName}, layers...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("tar: %v: %s", err, out)
	}
	if out, err := exec.Command(ctr, "-a", sock, "-n", "k8s.io", "images", "import", archive).CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", ref, err, out)
	}
	return nil
}

// The test binary's cluster, started on first use (Cluster).
var kubeOnce struct {
	sync.Once
	k *Kube
}

// Cluster is the test binary's cluster: the one it was re-run inside
// (RunInKube), or one started on first use; t is skipped (failed under
// CI) where there can be none. The binary's TestMain calls StopCluster.
func Cluster(t testing.TB) *Kube {
	t.Helper()
	RequiresRoot(t)
	kubeOnce.Do(func() {
		if dir := os.Getenv(EnvKubeDir); dir != "" {
			k := &Kube{Dir: dir}
			if k.repo, k.Err = repoRoot(); k.Err == nil {
				k.bin, k.Err = build(k.repo)
			}
			kubeOnce.k = k
			return
		}
		kubeOnce.k = StartKube()
	})
	return kubeOnce.k.Require(t)
}

// StopCluster stops the cluster Cluster started, if it did.
func StopCluster() {
	if kubeOnce.k != nil {
		kubeOnce.k.Stop()
	}
}

// InKube reports whether this process runs inside a test cluster's
// namespaces (RunInKube's inner run).
func InKube() bool { return os.Getenv(EnvKubeDir) != "" }

// RunInKube is a TestMain's whole work for tests that reach pods
// directly: it starts a cluster and runs this test binary again inside
// its namespaces, returning its exit status; run there (or where there
// can be no cluster, so that each test says why) it runs the tests.
func RunInKube(run func() int) int {
	if InKube() {
		// Entering a mount namespace leaves the process at its root.
		if wd := os.Getenv(envKubeWD); wd != "" {
			if err := os.Chdir(wd); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return run()
	}
	k := StartKube()
	if k.Err != nil {
		kubeOnce.Do(func() { kubeOnce.k = k })
		return run()
	}
	defer k.Stop()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := k.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	wd, _ := os.Getwd()
	cmd.Env = append(os.Environ(), EnvKubeDir+"="+k.Dir, envKubeWD+"="+wd)
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
