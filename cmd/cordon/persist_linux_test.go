package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	"golang.org/x/sys/unix"
)

// TestPersistentWorkspace drives persistent workspaces as a user would,
// through the CLI and a real daemon, on each host tier: a sandbox's files
// survive cordon stop and start (a new boot id, nothing of before
// running), a daemon restart, and a simulated reboot (the daemon and
// every process of its sandboxes killed, then the daemon started again):
// after that a sandbox is left stopped, one made with --autostart runs
// again. Its disk quota is ENOSPC to its workload; cordon rm removes its
// disk.
func TestPersistentWorkspace(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, tier := range []string{"process", "container", "gvisor"} {
		t.Run(tier, func(t *testing.T) {
			if tier != "process" {
				testutil.Requires(t, map[string]string{"container": "runc", "gvisor": "runsc"}[tier])
			}
			persistentWorkspace(t, tier)
		})
	}
}

func persistentWorkspace(t *testing.T, tier string) {
	dir, sock, d := serveInTemp(t)
	processDir := filepath.Join(dir, "process", "serve")
	state := filepath.Join(dir, "state")
	// Registered after serveInTemp's cleanup, so run before it: nothing
	// is removed from under a disk still mounted.
	t.Cleanup(func() { unmountDisks(t, processDir) })
	host := "--host=unix://" + sock
	run := mustCordon(t, host)
	describe := func(id string) api.Sandbox { t.Helper(); return describeSandbox(t, run, id) }
	id := strings.TrimSpace(run("create", "--tier", tier, "--persistent-workspace", "--disk", "64m"))
	auto := strings.TrimSpace(run("create", "--tier", tier, "--persistent-workspace", "--autostart"))
	const write = "printf one > /workspace/f && chmod 640 /workspace/f && mkdir -p ~/.cache && printf two > ~/.cache/g && echo written"
	const read = "stat -c %a /workspace/f; cat /workspace/f ~/.cache/g"
	for _, sb := range []string{id, auto} {
		if out := run("exec", sb, "--", "sh", "-c", write); out != "written\n" {
			t.Fatalf("write: %q", out)
		}
	}
	check := func(sb, when string) {
		t.Helper()
		if out := run("exec", sb, "--", "sh", "-c", read); out != "640\nonetwo" {
			t.Fatalf("%s: %q", when, out)
		}
	}
	boot := describe(id).BootID

	// Stop and start.
	run("stop", id)
	if got := describe(id).State; got != api.StateSuspended {
		t.Fatalf("stopped sandbox is %s", got)
	}
	if _, errOut, code := cordon(t, "exec", host, id, "--", "true"); code == 0 || !strings.Contains(errOut, "suspended") {
		t.Fatalf("exec in a stopped sandbox: exit %d, %s", code, errOut)
	}
	run("start", id)
	check(id, "after stop and start")
	if b := describe(id).BootID; b == boot || b == "" {
		t.Errorf("boot id %q after a start, %q before", b, boot)
	}

	// A daemon restart takes the running sandboxes back as they are.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	d = startServe(t, sock, state, filepath.Join(dir, "process"))
	check(id, "after a daemon restart")

	// A simulated reboot: the daemon and every process of its sandboxes
	// killed.
	boot = describe(id).BootID
	d.kill9()
	killSandboxes(t, processDir)
	d = startServe(t, sock, state, filepath.Join(dir, "process"))
	defer d.stop(t, sock)
	if got := describe(id); got.State != api.StateSuspended {
		t.Fatalf("after a reboot, a sandbox without autostart is %s (%s)", got.State, got.Reason)
	}
	if got := describe(auto); got.State != api.StateRunning {
		t.Fatalf("after a reboot, a sandbox with autostart is %s (%s)", got.State, got.Reason)
	}
	check(auto, "after a reboot, autostarted")
	run("start", id)
	check(id, "after a reboot, started")
	if b := describe(id).BootID; b == boot {
		t.Errorf("the same boot id %s after a reboot", b)
	}

	// Its processes killed under a running daemon (an OOM kill of its
	// agent, say): it is stopped, not lost, and starts again.
	killSandboxes(t, processDir)
	for deadline := time.Now().Add(30 * time.Second); describe(id).State != api.StateSuspended; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a persistent sandbox whose processes were killed is %s", describe(id).State)
		}
	}
	run("start", id)
	check(id, "after its processes were killed, started")

	// The quota.
	out, errOut, _ := cordon(t, "exec", host, id, "--", "sh", "-c", "dd if=/dev/zero of=/workspace/big bs=1M count=100 2>&1; rm -f /workspace/big")
	if !strings.Contains(out+errOut, "No space left") {
		t.Fatalf("filling a 64 MiB disk: %q %q", out, errOut)
	}

	// cordon rm removes the disks.
	run("rm", id, auto)
	if left, _ := filepath.Glob(filepath.Join(state, "disks", "*")); len(left) > 0 {
		t.Fatalf("disks left after rm: %v", left)
	}
}

// killSandboxes kills every process of the sandboxes a daemon's tiers
// keep under dir, as a reboot would: the process tier's inits, and each
// container's cgroups' processes.
func killSandboxes(t *testing.T, dir string) {
	killRecorded(dir)
	for _, tier := range []string{"oci", "gvisor"} {
		ids, _ := filepath.Glob(filepath.Join(dir, tier, "cordon-*"))
		for _, id := range ids {
			for _, procs := range cgroupProcs("cordon-oci/" + filepath.Base(id)) {
				b, _ := os.ReadFile(procs)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
		}
	}
}

// cgroupProcs lists the cgroup.procs files of cgroup (and its children)
// in every hierarchy.
func cgroupProcs(cgroup string) []string {
	var out []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, r := range roots {
		_ = filepath.WalkDir(filepath.Join(r, cgroup), func(p string, e os.DirEntry, err error) error {
			if err == nil && e.Name() == "cgroup.procs" {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// unmountDisks unmounts whatever disks a failed test left mounted under
// a daemon's tiers' state.
func unmountDisks(t *testing.T, dir string) {
	for _, pattern := range []string{"disks/*", "*/disks/*"} {
		mnts, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, m := range mnts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err == nil {
				t.Logf("unmounted a disk left at %s", m)
			}
		}
	}
}

// describeSandbox is how `cordon ls -o json ID` (run, with the daemon's
// --host) describes sandbox id: zero when it is not listed.
func describeSandbox(t *testing.T, run func(...string) string, id string) api.Sandbox {
	t.Helper()
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(run("ls", "-o", "json", id)), &[]*api.Sandbox{&sb}); err != nil {
		t.Fatal(err)
	}
	return sb
}
