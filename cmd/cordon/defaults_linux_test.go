package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
	"golang.org/x/sys/unix"
)

// TestDaemonDefaultLimits: a daemon gives a sandbox whose create names no
// limits a pids limit and a bounded writable space, bytes and files both
// (a tenant's empty files once took millions of inodes, gigabytes of
// kernel memory, from a sandbox without a memory limit); the operator
// changes them with cordon serve's flags, and a create's own limits win.
func TestDaemonDefaultLimits(t *testing.T) {
	testutil.RequiresRoot(t)
	limitsOf := func(t *testing.T, sock, id string) api.Limits {
		t.Helper()
		c, err := sclient.New("unix://"+sock, "")
		if err != nil {
			t.Fatal(err)
		}
		sb, err := c.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return sb.Spec.Limits
	}
	// space is the workspace's size and inodes, as df sees them.
	space := func(t *testing.T, host, id string) string {
		t.Helper()
		out, stderr, code := cordon(t, "exec", host, id, "--", "sh", "-c", "df -B1 --output=size,itotal /workspace | tail -n 1")
		if code != 0 {
			t.Fatalf("df: %d %s", code, stderr)
		}
		return strings.Join(strings.Fields(out), " ")
	}
	create := func(t *testing.T, host string, args ...string) string {
		t.Helper()
		out, stderr, code := cordon(t, append([]string{"create", host}, args...)...)
		if code != 0 {
			t.Fatalf("create %v: %d %s", args, code, stderr)
		}
		return strings.TrimSpace(out)
	}

	t.Run("Defaults", func(t *testing.T) {
		_, sock, d := serveInTemp(t)
		defer d.stop(t, sock)
		host := "--host=unix://" + sock
		id := create(t, host)
		if got := limitsOf(t, sock, id); got != (api.Limits{Pids: 1024, DiskBytes: 1 << 30}) {
			t.Errorf("a create without limits has %+v, want the daemon's defaults", got)
		}
		if got := space(t, host, id); got != "1073741824 262144" {
			t.Errorf("workspace size and inodes %q, want 1 GiB and one inode a page", got)
		}
		// The pids limit holds, and the agent keeps its reserve: it
		// serves on after the workload took every pid it may have.
		out, _, _ := cordon(t, "exec", host, id, "--", "python3", "-c", `import os, time
n = 0
try:
    while n < 5000:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print(n, e.errno)`)
		var n, errno int
		if _, err := fmt.Sscan(out, &n, &errno); err != nil || errno != 11 || n > 1024 {
			t.Errorf("forks under the default pids limit: %q, want EAGAIN by 1024", out)
		}
		if out, stderr, _ := cordon(t, "exec", host, id, "--", "echo", "alive"); out != "alive\n" {
			t.Errorf("after the workload took every pid: %q %s", out, stderr)
		}
		// A memory limit bounds the space itself (half of it), as without
		// defaults; the pids default still applies.
		id = create(t, host, "--memory", "64m")
		if got := limitsOf(t, sock, id); got != (api.Limits{MemoryBytes: 64 << 20, Pids: 1024}) {
			t.Errorf("a create with a memory limit has %+v", got)
		}
		if got := space(t, host, id); got != "33554432 8192" {
			t.Errorf("workspace of a 64 MiB sandbox: %q", got)
		}
	})

	t.Run("OperatorChanges", func(t *testing.T) {
		dir, sock, d := serveInTemp(t, "--default-pids", "0", "--default-disk", "8m", "--default-memory", "256m", "--default-cpus", "0.5",
			"--disk-size", "32m", "--max-disk-size", "48MiB")
		t.Cleanup(func() { unmountDisks(t, filepath.Join(dir, "process", "serve")) })
		defer d.stop(t, sock)
		host := "--host=unix://" + sock
		// A persistent workspace's disk: the operator's sizes, written as
		// sizes are.
		persistent := create(t, host, "--persistent-workspace")
		if got := limitsOf(t, sock, persistent).DiskBytes; got != 32<<20 {
			t.Errorf("a persistent workspace's disk quota is %d, want --disk-size's 32m", got)
		}
		if _, stderr, code := cordon(t, "create", host, "--persistent-workspace", "--disk", "64m"); code == 0 || !strings.Contains(stderr, "50331648") {
			t.Errorf("a disk above --max-disk-size: exit %d, %q", code, stderr)
		}
		id := create(t, host)
		if got := limitsOf(t, sock, id); got != (api.Limits{MemoryBytes: 256 << 20, CPUs: 0.5, DiskBytes: 8 << 20}) {
			t.Errorf("with the operator's defaults: %+v", got)
		}
		if got := space(t, host, id); got != "8388608 2048" {
			t.Errorf("workspace size and inodes %q, want 8 MiB and 2048", got)
		}
		id = create(t, host, "--disk", "16m", "--pids", "100")
		if got := limitsOf(t, sock, id); got != (api.Limits{MemoryBytes: 256 << 20, CPUs: 0.5, Pids: 100, DiskBytes: 16 << 20}) {
			t.Errorf("a create's own limits: %+v", got)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		// A value that is no size is a usage error (2); one out of range
		// stops the daemon (125). Either names what is wrong.
		for _, c := range []struct {
			flag, value, says string
			code              int
		}{
			{"--default-pids", "3", "limits.pids", 125},
			{"--default-disk", "1x", "-default-disk", 2},
			{"--default-memory", "1k", "limits.memoryBytes", 125},
			{"--default-cpus", "5000", "limits.cpus", 125},
			{"--disk-size", "-1", "-disk-size", 2},
			{"--disk-size", "1m", "--disk-size 1m: at least 16m", 125},
			{"--max-disk-size", "1g", "--max-disk-size 1g: at least --disk-size (4g)", 125},
			{"--max-snapshot-store", "0", "-max-snapshot-store", 2},
			{"--metrics-interval", "10ms", "--metrics-interval 10ms: 100ms or more", 125},
			{"--metrics-history", "1000h", "--metrics-history 1000h0m0s: more than 0, and at most 10000 readings", 125},
			{"--metrics-history", "-1s", "--metrics-history -1s", 125},
		} {
			dir := t.TempDir()
			_, stderr, code := cordon(t, "serve", "--listen", "unix://"+filepath.Join(dir, "s.sock"), "--state-dir", dir, c.flag, c.value)
			if code != c.code || !strings.Contains(stderr, c.says) {
				t.Errorf("serve %s %s: exit %d, %q; want %d naming %s", c.flag, c.value, code, stderr, c.code, c.says)
			}
		}
		dir := t.TempDir()
		if _, stderr, code := cordon(t, "serve", "--listen", "unix://"+filepath.Join(dir, "s.sock"), "--state-dir", dir, "--default-ttl", "2h", "--max-ttl", "1h"); code != 125 || !strings.Contains(stderr, "--default-ttl 2h0m0s: at most --max-ttl (1h0m0s)") {
			t.Errorf("a default TTL past the maximum: exit %d, %q", code, stderr)
		}
	})
}

// TestTierBounds: the cgroups every sandbox of a tier is made below hold
// them all to host.TierTasks and host.TierMemory together, set by the
// tier's first use where nobody set a bound (a tenant's hundred sandboxes
// at their own pids limits could otherwise take every task id of the host,
// and one without a memory limit every byte of its memory); an operator's
// own bound there stays.
func TestTierBounds(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "crun")
	own := map[string]string{}
	for _, c := range []string{"pids", "memory"} {
		var err error
		if own[c], err = host.CgroupOf(os.Getpid(), c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ tier, file, operator string }{
		{"process", filepath.Join("/sys/fs/cgroup/pids", own["pids"], "cordon", "pids.max"), fmt.Sprint(host.TierTasks())},
		{"process", filepath.Join("/sys/fs/cgroup/memory", own["memory"], "cordon", "memory.limit_in_bytes"), fmt.Sprint(host.TierMemory())},
		{"container", "/sys/fs/cgroup/pids/cordon-oci/pids.max", fmt.Sprint(host.TierTasks())},
		{"container", "/sys/fs/cgroup/memory/cordon-oci/memory.limit_in_bytes", fmt.Sprint(host.TierMemory())},
	} {
		want := c.operator
		// Unbounded for a moment, as on a host cordon never ran on.
		os.MkdirAll(filepath.Dir(c.file), 0o755)
		unbounded := "max"
		if strings.HasSuffix(c.file, "memory.limit_in_bytes") {
			unbounded = "-1"
		}
		if err := os.WriteFile(c.file, []byte(unbounded), 0); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := cordon(t, "run", "--tier", c.tier, "--", "true"); code != 0 {
			t.Fatalf("run --tier %s: %d %s", c.tier, code, errOut)
		}
		if got, _ := os.ReadFile(c.file); strings.TrimSpace(string(got)) != want {
			t.Errorf("%s after a %s sandbox: %q, want %s", c.file, c.tier, got, want)
		}
		// An operator's bound is kept (one a little below ours, which a
		// memory cgroup rounds to its pages).
		os.WriteFile(c.file, []byte("20000"+strings.Repeat("0", len(want)-5)), 0)
		mine, _ := os.ReadFile(c.file)
		if _, errOut, code := cordon(t, "run", "--tier", c.tier, "--", "true"); code != 0 {
			t.Fatalf("run --tier %s: %d %s", c.tier, code, errOut)
		}
		if got, _ := os.ReadFile(c.file); string(got) != string(mine) {
			t.Errorf("%s with an operator's bound %q: %q", c.file, mine, got)
		}
		os.WriteFile(c.file, []byte(want), 0)
	}
}

// TestPrivateStateDir: as root, a sandbox's processes are unprivileged
// mapped users who reach their state directory through its parents. One
// the operator made private (mode 0700, as mktemp -d makes it) is said
// so, naming it, on every tier that needs it, rather than failing in the
// runtime ("execve: permission denied", "cannot read client sync file").
func TestPrivateStateDir(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, c := range []struct{ tier, needs string }{{"process", ""}, {"container", "crun"}, {"gvisor", "runsc"}} {
		t.Run(c.tier, func(t *testing.T) {
			if c.needs != "" {
				testutil.Requires(t, c.needs)
			}
			dir := t.TempDir()
			os.Chmod(dir, 0o711)
			os.Chmod(filepath.Dir(dir), 0o711) // t.TempDir makes both levels private
			private := filepath.Join(dir, "state")
			if err := os.Mkdir(private, 0o700); err != nil {
				t.Fatal(err)
			}
			// (runsc keeps a network namespace of its own mounted there.)
			t.Cleanup(func() { unix.Unmount(filepath.Join(private, "gvisor", "runtime", "null-netns"), unix.MNT_DETACH) })
			cmd := exec.Command(buildCLI(t), "run", "--tier", c.tier, "--", "true")
			cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+private)
			out, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), private+" is not searchable by other users") {
				t.Fatalf("exit %d: %s", cmd.ProcessState.ExitCode(), out)
			}
			// Searchable, it serves.
			os.Chmod(private, 0o711)
			cmd = exec.Command(buildCLI(t), "run", "--tier", c.tier, "--", "echo", "served")
			cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+private)
			if out, err := cmd.CombinedOutput(); err != nil || string(out) != "served\n" {
				t.Fatalf("a searchable state directory: %v: %s", err, out)
			}
		})
	}
}
