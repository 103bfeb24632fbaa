package main_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/mounted"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestRunKilled: a container, gVisor or microVM sandbox whose `cordon run`
// is killed (SIGKILL, no teardown) stops by itself (its agent's lifeline
// closes; a VMM has a parent-death signal), and the next `cordon run` on
// the same state directory sweeps what it left: no directory, no runtime
// state; a runtime named for the killed run (CORDON_OCI_RUNTIME) and not
// for the next, its directory too.
func TestRunKilled(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, c := range []struct {
		tier, dir, runtime string
		// prefix names the tier's sandbox directories; pid, a file there,
		// names the process that holds the sandbox (its first field).
		prefix, pid string
		// ociRuntime: the killed run's CORDON_OCI_RUNTIME; the next
		// run names none, and sweeps that runtime's directory too.
		ociRuntime string
	}{
		{"container", "oci", "crun", "cordon-", "pid", ""},
		{"container", "oci-runc", "runc", "cordon-", "pid", "runc"},
		{"gvisor", "gvisor", "/usr/local/lib/cordon/runsc", "cordon-", "pid", ""},
		{"microvm", "microvm", "qemu-system-x86_64", "vm-", "vmm.pid", ""},
	} {
		t.Run(c.tier+"/"+filepath.Base(c.runtime), func(t *testing.T) {
			testutil.Requires(t, c.runtime)
			t.Setenv("CORDON_OCI_RUNTIME", c.ociRuntime)
			if c.tier == "microvm" {
				if out, _, _ := cordon(t, "tiers"); !strings.Contains(out, "microvm      yes") {
					testutil.Missing(t, "the microvm tier is unavailable: %s", out)
				}
			}
			state := t.TempDir()
			os.Chmod(filepath.Dir(state), 0o711)
			os.Chmod(state, 0o711)
			// (runsc keeps a network namespace of its own mounted there.)
			t.Cleanup(func() { unix.Unmount(filepath.Join(state, c.dir, "runtime", "null-netns"), unix.MNT_DETACH) })
			cmd := startSleeping(t, state, "--tier", c.tier)
			sandboxes := func() []string {
				ents, _ := os.ReadDir(filepath.Join(state, c.dir))
				var ids []string
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), c.prefix) {
						ids = append(ids, e.Name())
					}
				}
				return ids
			}
			ids := sandboxes()
			if len(ids) != 1 {
				cmd.Process.Kill()
				t.Fatalf("sandboxes in the state directory: %v", ids)
			}
			pidText, _ := os.ReadFile(filepath.Join(state, c.dir, ids[0], c.pid))
			pid := 0
			if f := strings.Fields(string(pidText)); len(f) > 0 {
				pid, _ = strconv.Atoi(f[0])
			}
			if pid <= 0 {
				t.Fatalf("the sandbox's init: %q", pidText)
			}
			cmd.Process.Kill()
			cmd.Wait()
			for deadline := time.Now().Add(20 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the sandbox's init (pid %d) outlived its killed creator by 20 s", pid)
				}
			}
			next := exec.Command(buildCLI(t), "run", "--tier", c.tier, "--", "true")
			next.Env = append(os.Environ(), "CORDON_OCI_RUNTIME=", "CORDON_STATE_DIR="+state)
			if b, err := next.CombinedOutput(); err != nil {
				t.Fatalf("the next run: %v: %s", err, b)
			}
			if ids := sandboxes(); len(ids) != 0 {
				t.Fatalf("left after the next run: %v", ids)
			}
			if c.tier == "microvm" {
				return // (no runtime keeps state of its own)
			}
			list := exec.Command(c.runtime, "--root", filepath.Join(state, c.dir, "runtime"), "list", "--quiet")
			if b, err := list.Output(); err != nil || strings.TrimSpace(string(b)) != "" {
				t.Fatalf("the runtime still knows: %q %v", b, err)
			}
		})
	}
}

// TestRunKilledStateGone: the cgroups of a killed `cordon run`'s sandbox
// whose state directory was removed too (a test's temporary one, a
// private daemon's), which no sweep of that directory will ever find, are
// removed by the next `cordon run` of the tier, whatever its state
// directory, once they are a minute old.
func TestRunKilledStateGone(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, c := range []struct{ tier, dir, runtime, prefix, parent string }{
		{"process", "", "", "sb-", "cordon"},
		{"container", "oci", "crun", "cordon-", "cordon-oci"},
	} {
		t.Run(c.tier, func(t *testing.T) {
			if c.runtime != "" {
				testutil.Requires(t, c.runtime)
			}
			state := testutil.StateDir(t)
			cmd := startSleeping(t, state, "--tier", c.tier, "--memory", "64m")
			ents, _ := os.ReadDir(filepath.Join(state, c.dir))
			var id string
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), c.prefix) {
					id = e.Name()
				}
			}
			cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", c.parent, id))
			if id == "" || len(cgroups) == 0 {
				cmd.Process.Kill()
				t.Fatalf("sandbox %q, its cgroups %v", id, cgroups)
			}
			cmd.Process.Kill()
			cmd.Wait()
			// Its processes end with their creator; its state goes whole.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				procs, _ := os.ReadFile(filepath.Join(cgroups[0], "cgroup.procs"))
				if len(procs) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("processes outlived their killed creator by 20 s: %s", procs)
				}
			}
			if err := mounted.Remove(state); err != nil {
				t.Fatal(err)
			}
			// A minute on (their times set back), another state directory.
			old := time.Now().Add(-time.Hour)
			for _, cg := range cgroups {
				os.Chtimes(cg, old, old)
			}
			next := exec.Command(buildCLI(t), "run", "--tier", c.tier, "--", "true")
			next.Env = append(os.Environ(), "CORDON_STATE_DIR="+testutil.StateDir(t))
			if b, err := next.CombinedOutput(); err != nil {
				t.Fatalf("the next run: %v: %s", err, b)
			}
			for _, cg := range cgroups {
				if _, err := os.Stat(cg); err == nil {
					t.Errorf("left after the next run: %s", cg)
				}
			}
		})
	}
}

// startSleeping starts `cordon run FLAGS -- sleep` on state directory
// state, and returns once the command runs.
func startSleeping(t *testing.T, state string, flags ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(buildCLI(t), append(append([]string{"run"}, flags...), "--", "sh", "-c", "echo started; exec sleep 1000")...)
	cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+state)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the command did not start: %q %v: %s", line, err, stderr.String())
	}
	return cmd
}

// TestRunStateTooDeep: a state directory so deep that a sandbox's sockets
// cannot be bound below it is refused saying so, on each tier that binds
// them there, rather than as the kernel's "invalid argument".
func TestRunStateTooDeep(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, c := range []struct{ tier, runtime string }{{"process", ""}, {"container", "crun"}} {
		t.Run(c.tier, func(t *testing.T) {
			if c.runtime != "" {
				testutil.Requires(t, c.runtime)
			}
			state := testutil.StateDir(t)
			for len(state) < 90 {
				state = filepath.Join(state, "deeper")
			}
			if err := os.MkdirAll(state, 0o711); err != nil {
				t.Fatal(err)
			}
			for d := state; d != "/"; d = filepath.Dir(d) {
				if strings.HasPrefix(d, os.TempDir()+"/") {
					os.Chmod(d, 0o711)
				}
			}
			cmd := exec.Command(buildCLI(t), "run", "--tier", c.tier, "--", "true")
			cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+state)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(string(out), "more than a unix socket's 107") || !strings.Contains(string(out), "CORDON_STATE_DIR") {
				t.Fatalf("exit %d: %s", code, out)
			}
		})
	}
}

// TestRunPrunesSharedSources: what earlier runs left in a tier's state
// directory for sandboxes to bind as they start, one per kind of
// content, goes once unused for ten minutes: the copies of the agent
// (one per build: an upgrade, a rebuild) and the identity files (one per
// user and root); the ones this run used stay. A container's skeleton
// (its root: mount points, which removing would detach in a running
// container) stays whatever its age.
func TestRunPrunesSharedSources(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, c := range []struct {
		tier, dir, runtime string
		kinds              []string
	}{
		{"process", "", "", []string{"identity"}},
		{"container", "oci", "crun", []string{"agent", "identity"}},
		{"gvisor", "gvisor", "/usr/local/lib/cordon/runsc", []string{"agent", "identity"}},
	} {
		t.Run(c.tier, func(t *testing.T) {
			if c.runtime != "" {
				testutil.Requires(t, c.runtime)
			}
			state := testutil.StateDir(t)
			base := filepath.Join(state, c.dir)
			skeleton := plantShared(t, base, "skeleton")
			stale := map[string]string{}
			for _, kind := range c.kinds {
				stale[kind] = plantShared(t, base, kind)
			}
			cmd := exec.Command(buildCLI(t), "run", "--tier", c.tier, "--", "true")
			cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+state)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			for _, dir := range stale {
				checkPruned(t, dir)
			}
			if _, err := os.Stat(skeleton); err != nil {
				t.Errorf("an old skeleton: %v", err)
			}
		})
	}
}

// plantShared makes base/KIND-0000000000000000, a shared directory as an
// earlier run would have left it, unused for an hour.
func plantShared(t *testing.T, base, kind string) string {
	t.Helper()
	dir := filepath.Join(base, kind+"-0000000000000000")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "left"), []byte("by an earlier run"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(dir, old, old)
	return dir
}

// checkPruned checks that the planted dir is gone and one directory of its
// kind, the run's, is left.
func checkPruned(t *testing.T, planted string) {
	t.Helper()
	kind, _, _ := strings.Cut(filepath.Base(planted), "-")
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(planted), kind+"-*"))
	if len(left) != 1 || left[0] == planted {
		t.Errorf("%s directories after the run: %v", kind, left)
	}
}
