//go:build linux

package oci_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
)

// runtimes are the OCI runtimes the tiers are tested with (runsc is the
// gvisor tier); each must be present under CI.
var runtimes = []string{"crun", "runc", oci.CurrentRunsc}

func backend(t *testing.T, runtime string) *oci.Backend { return backendTB(t, runtime) }

func backendTB(t testing.TB, runtime string) *oci.Backend {
	t.Helper()
	testutil.RequiresRoot(t)
	testutil.Requires(t, runtime)
	dir := testutil.StateDir(t)
	tier := oci.Name
	if filepath.Base(runtime) == "runsc" {
		tier, dir = oci.GVisor, filepath.Join(dir, "gvisor")
	}
	b := oci.New(oci.Config{Tier: tier, Runtime: runtime, AgentPath: testutil.BuildAgent(t), StateDir: dir})
	if err := b.Probe(t.Context()); err != nil {
		testutil.Missing(t, "container tier with %s unavailable: %v", runtime, err)
	}
	return b
}

func forEachRuntime(t *testing.T, f func(t *testing.T, b *oci.Backend)) {
	for _, rt := range runtimes {
		t.Run(filepath.Base(rt), func(t *testing.T) { f(t, backend(t, rt)) })
	}
}

func TestConformance(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		f := conformance.FromBackend(b, sandbox.Spec{})
		if b.Name() != oci.GVisor {
			f = conformance.PassingTCP(f) // gVisor has a kernel of its own
		}
		conformance.Run(t, f)
	})
}

func create(t *testing.T, b *oci.Backend, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	return sandboxtest.Create(t, b, spec)
}

func sh(t *testing.T, sb *sandbox.Sandbox, script string) (string, *sandbox.Result) {
	t.Helper()
	return sandboxtest.Sh(t, sb, script)
}

func creator(b *oci.Backend) adversarial.Create {
	return func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox { return create(t, b, spec) }
}

func TestAdversarial(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) { adversarial.Run(t, creator(b)) })
}

func TestLimits(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) { adversarial.Limits(t, b.Capabilities(), creator(b)) })
}

// TestTaskCeiling: without a pids limit, every runtime's sandbox still has
// the process tier's ceiling on its tasks, which nothing inside can raise.
func TestTaskCeiling(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		sb := create(t, b, sandbox.Spec{})
		out, _ := sh(t, sb, "grep 'Max processes' /proc/self/limits")
		if f := strings.Fields(out); len(f) < 4 || f[2] != strconv.Itoa(baseline.DefaultTasks) || f[3] != f[2] {
			t.Fatalf("%q, want soft and hard %d", out, baseline.DefaultTasks)
		}
		if out := adversarial.Py(t, sb, "import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_NPROC, (100000, 100000))\n    print('raised')\nexcept (ValueError, OSError):\n    print('refused')"); out != "refused\n" {
			t.Fatalf("raising the ceiling from inside: %q", out)
		}
	})
}

// TestScratchSize: /dev/shm holds 64 MiB, as on the process tier, and the
// scratch tmpfs share the writable space, half the memory limit by
// default.
func TestScratchSize(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		spec := sandbox.Spec{}
		if b.Capabilities().MemoryLimit {
			spec.Limits.MemoryBytes = 96 << 20
		}
		out, _ := sh(t, create(t, b, spec), "df -k --output=size /dev/shm /tmp /workspace /home/sandbox | tail -n +2")
		sizes := strings.Fields(out)
		if len(sizes) != 4 || sizes[0] != strconv.Itoa(64<<10) {
			t.Fatalf("sizes of /dev/shm, /tmp, /workspace, /home/sandbox: %q", out)
		}
		// With one, they share half of it (the writable space's default):
		// a quarter of that to /tmp, half to the workspace, an eighth to
		// the home directory.
		if spec.Limits.MemoryBytes > 0 && strings.Join(sizes[1:], " ") != "12288 24576 6144" {
			t.Errorf("a 96 MiB sandbox's scratch sizes: %q", out)
		}
		// Without a memory limit the scratch mounts share half the host's
		// memory: half, a quarter, an eighth, an eighth.
		out, _ = sh(t, create(t, b, sandbox.Spec{}), "df -k --output=size /workspace /tmp /home/sandbox /var/tmp | tail -n +2")
		if want := []string{scratchKiB(2), scratchKiB(4), scratchKiB(8), scratchKiB(8)}; !slices.Equal(strings.Fields(out), want) {
			t.Errorf("scratch sizes without a memory limit: %q, want %q", out, want)
		}
	})
}

// scratchKiB is what df shows for a scratch mount given budget/share bytes
// (tmpfs rounds its size up to whole pages).
func scratchKiB(share int64) string {
	return strconv.FormatInt((oci.ScratchBudget()/share+4095)/4096*4, 10)
}

func TestEscapeesDie(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) { adversarial.Escapees(t, creator(b)) })
}

// TestLayout: layout directories are bound as on the process tier (id-mapped
// mounts attached under the sandbox's directory), and teardown leaves the
// host directories and their contents in place.
func TestLayout(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		if !b.Capabilities().Layout {
			p := sandbox.NewProvider([]sandbox.Backend{b})
			if _, err := p.Create(t.Context(), sandbox.Spec{Layout: sandbox.Layout{Outputs: t.TempDir()}}); !errors.Is(err, sandbox.ErrUnsupported) {
				t.Fatalf("layout on %s: %v, want a refusal", b.Name(), err)
			}
			return
		}
		adversarial.Layout(t, creator(b))
	})
}

// TestLandlock: runc and crun sandboxes confine commands' writes with
// Landlock as the process tier does; gVisor, whose kernel has none,
// refuses a spec that requires it.
func TestLandlock(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		if !b.Capabilities().Landlock {
			p := sandbox.NewProvider([]sandbox.Backend{b})
			if _, err := p.Create(t.Context(), sandbox.Spec{RequireLandlock: true}); !errors.Is(err, sandbox.ErrUnsupported) {
				t.Fatalf("Landlock on %s: %v, want a refusal", b.Name(), err)
			}
			return
		}
		adversarial.Landlock(t, creator(b))
	})
}

// TestTeardownLeavesNothing: after Destroy the runtime no longer knows the
// container, and its cgroups, directory and processes are gone.
func TestTeardownLeavesNothing(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		p := sandbox.NewProvider([]sandbox.Backend{b})
		limits := sandbox.Limits{MemoryBytes: 128 << 20, Pids: 64, CPUs: 1}
		if !b.Capabilities().MemoryLimit {
			limits = sandbox.Limits{CPUs: 1}
		}
		sb, err := p.Create(t.Context(), sandbox.Spec{Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		sh(t, sb, "setsid sleep 300 >/dev/null 2>&1 &")
		id := containerID(t, sb)
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		checkGone(t, b, id)
	})
}

func containerID(t *testing.T, sb *sandbox.Sandbox) string {
	t.Helper()
	a, err := sb.Persist()
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ ID string }
	if err := json.Unmarshal(a.State, &st); err != nil || st.ID == "" {
		t.Fatalf("state %s: %v", a.State, err)
	}
	return st.ID
}

func checkGone(t *testing.T, b *oci.Backend, id string) {
	t.Helper()
	root := b.StateDir()
	if out, err := exec.Command(b.Runtime(), "--root", filepath.Join(root, "runtime"), "state", id).CombinedOutput(); err == nil {
		t.Errorf("the runtime still knows %s: %s", id, out)
	}
	if _, err := os.Stat(filepath.Join(root, id)); err == nil {
		t.Errorf("the directory of %s remains", id)
	}
	for _, c := range []string{"memory", "pids", "cpu", "freezer", "unified", ""} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c, "cordon-oci", id)); err == nil {
			t.Errorf("cgroup %s of %s remains", c, id)
		}
	}
}

// TestHalfCreated: a container the runtime created but never started (a
// create cut short) is swept, as is one whose sandbox nobody holds.
func TestHalfCreated(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		p := sandbox.NewProvider([]sandbox.Backend{b})
		kept, err := p.Create(t.Context(), sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		defer kept.Destroy(context.Background())
		stray, err := p.Create(t.Context(), sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		strayID := containerID(t, stray)
		// Half-created: the runtime's create step alone, on a copy of a
		// bundle, under a cordon id.
		root := b.StateDir()
		half := "cordon-halfcreated" + fmt.Sprint(os.Getpid())
		bundle := filepath.Join(root, half)
		if out, err := exec.Command("cp", "-a", filepath.Join(root, containerID(t, kept)), bundle).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		cfg := filepath.Join(bundle, "bundle", "config.json")
		raw, _ := os.ReadFile(cfg)
		// Its own cgroup, and no descriptor to wait for; a user namespace
		// the runtime makes (the one the kept sandbox's container joined
		// was held only until it had).
		fixed := strings.ReplaceAll(string(raw), containerID(t, kept), half)
		fixed = regexp.MustCompile(`,\s*"path":\s*"/proc/\d+/ns/user"`).ReplaceAllString(fixed, "")
		if err := os.WriteFile(cfg, []byte(fixed), 0o600); err != nil {
			t.Fatal(err)
		}
		// The created container keeps the runtime's stdio: a file, not a
		// pipe that would never reach EOF.
		logf, err := os.CreateTemp(t.TempDir(), "create")
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.Command(b.Runtime(), "--root", filepath.Join(root, "runtime"), "create", "--bundle", filepath.Join(bundle, "bundle"), half)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Run(); err != nil {
			out, _ := os.ReadFile(logf.Name())
			t.Fatalf("create: %v: %s", err, out)
		}
		if err := p.Sweep(t.Context(), []*sandbox.Sandbox{kept}); err != nil {
			t.Fatal(err)
		}
		checkGone(t, b, half)
		checkGone(t, b, strayID)
		_ = stray.Destroy(context.Background()) // already gone: confirms again
		if out, _ := sh(t, kept, "echo kept"); out != "kept\n" {
			t.Fatalf("the kept sandbox: %q", out)
		}
	})
}

// TestRootFS: a given root filesystem (as an image's is) is the sandbox's
// root, read-only, and shared: two sandboxes use it at once and neither
// changes it.
func TestRootFS(t *testing.T) {
	bb := testutil.Requires(t, "busybox")[0]
	root := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"bin", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755)
	for _, applet := range []string{"sh", "cat", "ls", "touch", "id", "wc", "echo", "test"} {
		os.Symlink("busybox", filepath.Join(root, "bin", applet))
	}
	os.WriteFile(filepath.Join(root, "etc", "marker"), []byte("from the rootfs\n"), 0o644)
	os.Chmod(filepath.Dir(root), 0o755)
	before := listTree(t, root)
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		one := create(t, b, sandbox.Spec{RootFS: root})
		two := create(t, b, sandbox.Spec{RootFS: root})
		for _, sb := range []*sandbox.Sandbox{one, two} {
			out, _ := sh(t, sb, "cat /etc/marker; touch /etc/x /bin/x 2>&1; echo ok > /workspace/w && cat /workspace/w; test -e /usr/bin/python3 || echo no-host-usr")
			// (gVisor answers EACCES before EROFS: the files are root's.)
			refused := strings.Count(out, "Read-only")
			if adversarial.UserSpaceKernel[b.Name()] {
				refused += strings.Count(out, "Permission denied")
			}
			if !strings.HasPrefix(out, "from the rootfs\n") || refused != 2 || !strings.Contains(out, "ok\n") || !strings.Contains(out, "no-host-usr") {
				t.Fatalf("inside: %q", out)
			}
		}
	})
	if after := listTree(t, root); after != before {
		t.Fatalf("the shared root changed:\n%s\nwas\n%s", after, before)
	}
}

func listTree(t *testing.T, root string) string {
	var b strings.Builder
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			fmt.Fprintf(&b, "%s %v %d\n", p, info.Mode(), info.Size())
		}
		return nil
	})
	return b.String()
}

func TestPauseResume(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		sb := create(t, b, sandbox.Spec{})
		if !sb.CanPause() {
			t.Fatal("a container cannot pause")
		}
		sandboxtest.PauseResume(t, sb)
	})
}

// TestDebianRoot: a Debian minbase root runs on every runtime, read-only.
func TestDebianRoot(t *testing.T) {
	root := testutil.DebianMinbase(t)
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) { adversarial.DebianRoot(t, creator(b), root) })
}

// TestGVisorRefusesMemoryLimits: the gvisor tier refuses a memory limit,
// which it cannot enforce on the workload alone, with a clear error.
func TestGVisorRefusesMemoryLimits(t *testing.T) {
	b := backend(t, oci.CurrentRunsc)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	if _, err := p.Create(t.Context(), sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a memory limit: %v", err)
	}
}

// TestGVisorDebianBuild: the gvisor tier also runs on Debian's 2022 runsc
// (ptrace platform only). That build's statx refuses what Debian 12's
// coreutils ask, so the suites run on the current build; this checks the
// backend drives the old one: create, commands, files, teardown.
func TestGVisorDebianBuild(t *testing.T) {
	testutil.Requires(t, "/usr/bin/runsc")
	b := backend(t, "/usr/bin/runsc")
	sb := create(t, b, sandbox.Spec{Limits: sandbox.Limits{Pids: 16}})
	if out, _ := sh(t, sb, "echo ok; id -u; cat /proc/1/comm"); out != "ok\n1000\ncordon-agent\n" {
		t.Fatalf("inside: %q", out)
	}
	// Its sentry enforces the limit as a task limit of the workload's user,
	// with the agent's headroom (it has no cgroups of its own); the first
	// process counts as the agent's.
	adversarial.CheckPidsLimit(t, sb, 16, 16+1)
	// Its tmpfs takes the size option too: the scratch budget holds.
	if out, _ := sh(t, sb, "df -k --output=size /workspace /tmp | tail -n +2"); !slices.Equal(strings.Fields(out), []string{scratchKiB(2), scratchKiB(4)}) {
		t.Errorf("scratch sizes: %q", out)
	}
	if err := sb.WriteFile(t.Context(), "f.txt", []byte("data")); err != nil {
		t.Fatal(err)
	}
	if b, err := sb.ReadFile(t.Context(), "f.txt"); err != nil || string(b) != "data" {
		t.Fatalf("read back: %q %v", b, err)
	}
	id := containerID(t, sb)
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkGone(t, b, id)
}

// TestHostDeadline: see adversarial.HostDeadline.
func TestHostDeadline(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) { adversarial.HostDeadline(t, b) })
}

// TestPersistentDisk: persistent workspaces on a disk of the provider's
// (sandbox.WithDisks) under every runtime (gVisor's disk is mounted as it
// is, its gofer's ids the same at every start: host.DiskIDBase); a tier
// that cannot keep one refuses it.
func TestPersistentDisk(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		if !b.Capabilities().Disk {
			p := sandbox.NewProvider([]sandbox.Backend{b}, sandbox.WithDisks(t.TempDir(), 0))
			if _, err := p.Create(t.Context(), sandbox.Spec{PersistentWorkspace: true}); !errors.Is(err, sandbox.ErrUnsupported) {
				t.Fatalf("a persistent workspace on %s: %v, want a refusal", b.Name(), err)
			}
			return
		}
		sandboxtest.PersistentDisk(t, b)
	})
}
