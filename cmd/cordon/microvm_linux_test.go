package main_test

import (
	"encoding/json"
	"io"
	"net/http"
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
	// Its metrics: the guest's memory, and its one CPU, against which its
	// use is measured (not the host's cores).
	var stats []struct {
		ID string `json:"id"`
		api.Metrics
	}
	if err := json.Unmarshal([]byte(run("stats", "-o", "json", "--interval", "100ms", id)), &stats); err != nil || len(stats) != 1 ||
		stats[0].CPUCount != 1 || stats[0].MemoryBytes == nil || *stats[0].MemoryBytes <= 0 || stats[0].MemoryLimitBytes != 256<<20 {
		t.Errorf("stats: %+v %v", stats, err)
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
	// Both were claimed from the pool, not made when asked for.
	if m := daemonGet(t, sock, "/metrics"); !strings.Contains(m, `cordon_sandbox_create_seconds_count{source="pool"} 2`) {
		t.Fatalf("the creates were not claims from the pool:\n%s", m)
	}
	pool("rm", "vms")
}

// daemonGet is the body of GET path from the daemon on the unix socket
// sock (as its local administrator).
func daemonGet(t *testing.T, sock, path string) string {
	t.Helper()
	resp, err := unixHTTP(sock).Get("http://cordon" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return string(b)
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

// TestMicroVMOutlivesDaemon: a daemon's microVMs outlive it, as the host
// tiers' sandboxes do: stopped (SIGTERM) or killed outright, the next
// daemon takes each VM back, with its boot, its files and the programs it
// runs; and a persistent one whose VM was killed while no daemon ran (a
// reboot) is found stopped, or started again with --autostart, its
// workspace kept.
func TestMicroVMOutlivesDaemon(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "qemu-system-x86_64")
	if out, _, _ := cordon(t, "tiers"); !strings.Contains(out, "microvm      yes") {
		testutil.Missing(t, "the microvm tier is unavailable: %s", out)
	}
	dir, sock, d := serveInTemp(t)
	state := filepath.Join(dir, "state")
	host := "--host=unix://" + sock
	run := mustCordon(t, host)
	describe := func(id string) api.Sandbox { t.Helper(); return describeSandbox(t, run, id) }
	plain := strings.TrimSpace(run("create", "--tier", "microvm", "--memory", "256m"))
	id := strings.TrimSpace(run("create", "--tier", "microvm", "--persistent-workspace", "--disk", "64m", "--memory", "256m"))
	auto := strings.TrimSpace(run("create", "--tier", "microvm", "--persistent-workspace", "--disk", "64m", "--memory", "256m", "--autostart"))
	all := []string{plain, id, auto}
	boots := map[string]string{}
	for _, sb := range all {
		run("exec", sb, "--", "sh", "-c", "printf one > /workspace/f && printf two > ~/g")
		run("exec", "-d", "--name", "waiter", sb, "--", "sleep", "600")
		boots[sb] = describe(sb).BootID
	}
	check := func(sb, want, when string) {
		t.Helper()
		if out := run("exec", sb, "--", "sh", "-c", "cat /workspace/f ~/g"); out != want {
			t.Fatalf("%s: %q, want %q", when, out, want)
		}
	}
	taken := func(when string) {
		t.Helper()
		for _, sb := range all {
			if got := describe(sb); got.State != api.StateRunning || got.BootID != boots[sb] {
				t.Fatalf("%s: %s is %s with boot %q (was %q)", when, sb, got.State, got.BootID, boots[sb])
			}
			check(sb, "onetwo", when)
			if out := run("sessions", sb); !strings.Contains(out, "waiter") || !strings.Contains(out, "running") {
				t.Fatalf("%s: the program %s ran is gone: %s", when, sb, out)
			}
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	d = startServe(t, sock, state, filepath.Join(dir, "process"))
	taken("after a daemon restart")
	d.kill9()
	d = startServe(t, sock, state, filepath.Join(dir, "process"))
	taken("after the daemon was killed")

	// A reboot: the daemon and every VM killed. What a workload flushed
	// is on its disk.
	for _, sb := range []string{id, auto} {
		run("exec", sb, "--", "sh", "-c", "printf three > /workspace/f && sync")
	}
	d.kill9()
	if killVMMs(filepath.Join(dir, "process", "serve", "microvm")) == 0 {
		t.Fatal("no VMMs recorded to kill")
	}
	d = startServe(t, sock, state, filepath.Join(dir, "process"))
	defer d.stop(t, sock)
	// (Gone with its VM, as on every tier: recorded destroyed, reason
	// restart, and listed no more.)
	if got := describe(plain).State; got != "" {
		t.Errorf("after a reboot, a VM without a persistent workspace is listed %s", got)
	}
	if got := describe(id).State; got != api.StateSuspended {
		t.Fatalf("after a reboot, a persistent VM without autostart is %s", got)
	}
	if got := describe(auto).State; got != api.StateRunning {
		t.Fatalf("after a reboot, a persistent VM with autostart is %s", got)
	}
	check(auto, "threetwo", "after a reboot, autostarted")
	run("start", id)
	check(id, "threetwo", "after a reboot, started")
	run("rm", id, auto)
	if left, _ := filepath.Glob(filepath.Join(state, "disks", "*")); len(left) > 0 {
		t.Fatalf("disks left after rm: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "process", "serve", "microvm", "vm-*")); len(left) > 0 {
		t.Fatalf("VMs left after rm: %v", left)
	}
}
