package main_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
)

// TestMicroVM drives the microvm tier as a user would: cordon tiers says
// how its VMs run, cordon run --tier microvm runs a command in a VM of
// its own with no further flags, a daemon creates, pauses, resumes, runs
// commands in and removes one, and its warm pool hands out started VMs
// and fills again.
func TestMicroVM(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "qemu-system-x86_64")
	out, errOut, code := cordon(t, "tiers")
	if code != 0 || !strings.Contains(out, "microvm      yes") {
		if strings.Contains(out, "microvm      no") {
			testutil.Missing(t, "the microvm tier is unavailable: %s", out)
		}
		t.Fatalf("cordon tiers: %d %q %s", code, out, errOut)
	}
	if !strings.Contains(out, "qemu microvm, ") {
		t.Fatalf("cordon tiers does not say how VMs run:\n%s", out)
	}
	out, errOut, code = cordon(t, "run", "--tier", "microvm", "--", "sh", "-c", "uname -r; python3 -c 'print(6*7)'")
	if code != 0 || !strings.HasSuffix(out, "\n42\n") {
		t.Fatalf("cordon run --tier microvm: %d %q %s", code, out, errOut)
	}
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	run := mustCordon(t, host)
	id := strings.TrimSpace(run("create", "--tier", "microvm", "--memory", "256m"))
	run("exec", id, "--", "sh", "-c", "echo kept > f")
	run("pause", id)
	run("resume", id)
	if out := run("exec", id, "--", "cat", "f"); out != "kept\n" {
		t.Fatalf("after pause and resume: %q", out)
	}
	run("rm", id)

	// A warm pool of VMs: a create of its spec claims a started one
	// (each sandbox its own VM, its own boot), and the pool fills again.
	pool := func(args ...string) string {
		t.Helper()
		out, errOut, code := cordon(t, append([]string{"pool", args[0], host}, args[1:]...)...)
		if code != 0 {
			t.Fatalf("cordon pool %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	pool("put", "vms", "--size", "1", "--tier", "microvm", "--memory", "256m")
	var boots []string
	for range 2 {
		awaitPoolReady(t, pool, "vms", 1)
		id := strings.TrimSpace(run("create", "--pool", "vms"))
		boots = append(boots, run("exec", id, "--", "cat", "/proc/sys/kernel/random/boot_id"))
		run("rm", id)
	}
	if boots[0] == boots[1] || boots[0] == "" {
		t.Fatalf("two sandboxes from the pool had boot ids %q", boots)
	}
	pool("rm", "vms")
}

// awaitPoolReady waits for the daemon's pool name to hold n started
// sandboxes.
func awaitPoolReady(t *testing.T, pool func(...string) string, name string, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var pools []api.Pool
		if err := json.Unmarshal([]byte(pool("ls", "-o", "json")), &pools); err != nil {
			t.Fatal(err)
		}
		for _, p := range pools {
			if p.Name == name && p.Ready >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never held %d ready sandboxes: %+v", name, n, pools)
		}
	}
}

// TestPersistentMicroVM: a persistent workspace on the microvm tier,
// through a daemon: its files survive a stop and a start, the daemon's
// restart (its VMs cannot outlive it: it stops them, flushed, and the
// next daemon finds them stopped, or starts them with --autostart), and
// a daemon killed outright (the guest flushes its disk as it powers off,
// and a start waits for the old VM to let go of it).
func TestPersistentMicroVM(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "qemu-system-x86_64")
	if out, _, _ := cordon(t, "tiers"); !strings.Contains(out, "microvm      yes") {
		testutil.Missing(t, "the microvm tier is unavailable: %s", out)
	}
	dir, sock, d := serveInTemp(t)
	state := filepath.Join(dir, "state")
	host := "--host=unix://" + sock
	run := mustCordon(t, host)
	stateOf := func(id string) string {
		t.Helper()
		var sb api.Sandbox
		if err := json.Unmarshal([]byte(run("ls", "-o", "json", id)), &[]*api.Sandbox{&sb}); err != nil {
			t.Fatal(err)
		}
		return sb.State
	}
	id := strings.TrimSpace(run("create", "--tier", "microvm", "--persistent-workspace", "--disk", "64m", "--memory", "256m"))
	auto := strings.TrimSpace(run("create", "--tier", "microvm", "--persistent-workspace", "--disk", "64m", "--memory", "256m", "--autostart"))
	check := func(sb, want, when string) {
		t.Helper()
		if out := run("exec", sb, "--", "sh", "-c", "cat /workspace/f ~/g"); out != want {
			t.Fatalf("%s: %q, want %q", when, out, want)
		}
	}
	for _, sb := range []string{id, auto} {
		run("exec", sb, "--", "sh", "-c", "printf one > /workspace/f && printf two > ~/g")
	}
	run("stop", id)
	if got := stateOf(id); got != api.StateSuspended {
		t.Fatalf("a stopped sandbox is %s", got)
	}
	run("start", id)
	check(id, "onetwo", "after stop and start")

	// A daemon restart: written just before it, kept.
	for _, sb := range []string{id, auto} {
		run("exec", sb, "--", "sh", "-c", "printf three > /workspace/f")
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	d = startServe(t, sock, state, filepath.Join(dir, "process"))
	if got := stateOf(id); got != api.StateSuspended {
		t.Fatalf("after a daemon restart, a microVM sandbox without autostart is %s", got)
	}
	if got := stateOf(auto); got != api.StateRunning {
		t.Fatalf("after a daemon restart, a microVM sandbox with autostart is %s", got)
	}
	check(auto, "threetwo", "after a daemon restart, autostarted")
	run("start", id)
	check(id, "threetwo", "after a daemon restart, started")

	// The daemon killed outright: nothing asks the guest, which flushes
	// its disk as its port closes.
	run("exec", id, "--", "sh", "-c", "printf four > /workspace/f")
	d.kill9()
	d = startServe(t, sock, state, filepath.Join(dir, "process"))
	defer d.stop(t, sock)
	run("start", id)
	check(id, "fourtwo", "after the daemon was killed, started")
	run("rm", id, auto)
	if left, _ := filepath.Glob(filepath.Join(state, "disks", "*")); len(left) > 0 {
		t.Fatalf("disks left after rm: %v", left)
	}
}
