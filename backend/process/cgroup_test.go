//go:build linux

package process

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// The machines that run CI have cgroup v1 controllers only; this checks
// what the v2 layout writes, against plain files standing in for cgroupfs.
func TestCgroupV2Files(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.max", "cgroup.procs", "memory.events"} {
		os.WriteFile(filepath.Join(dir, f), nil, 0o644)
	}
	os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n"), 0o644)
	cg := &cgroups{v2: dir, unified: true, v1: map[string]string{}}
	if err := cg.setLimits(sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 1.5}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"memory.max": "268435456", "memory.swap.max": "0", "pids.max": "64", "cpu.max": "150000 100000"}
	for f, v := range want {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if strings.TrimSpace(string(b)) != v {
			t.Errorf("%s = %q, want %q", f, b, v)
		}
	}
	if n := cg.oomKills(); n != 2 {
		t.Errorf("oom kills %d, want 2", n)
	}
}

func TestCgroupV1Files(t *testing.T) {
	v1 := map[string]string{}
	for _, c := range []string{"memory", "pids", "cpu"} {
		d := filepath.Join(t.TempDir(), c)
		os.Mkdir(d, 0o755)
		v1[c] = d
	}
	os.WriteFile(filepath.Join(v1["memory"], "memory.memsw.limit_in_bytes"), nil, 0o644)
	os.WriteFile(filepath.Join(v1["memory"], "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"), 0o644)
	cg := &cgroups{v1: v1}
	if err := cg.setLimits(sandbox.Limits{MemoryBytes: 64 << 20, Pids: 10, CPUs: 0.25}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"memory/memory.limit_in_bytes": "67108864", "memory/memory.memsw.limit_in_bytes": "67108864",
		"pids/pids.max": "10", "cpu/cpu.cfs_period_us": "100000", "cpu/cpu.cfs_quota_us": "25000",
	}
	for f, v := range want {
		c, file, _ := strings.Cut(f, "/")
		b, _ := os.ReadFile(filepath.Join(v1[c], file))
		if strings.TrimSpace(string(b)) != v {
			t.Errorf("%s = %q, want %q", f, b, v)
		}
	}
	if n := cg.oomKills(); n != 5 {
		t.Errorf("oom kills %d, want 5", n)
	}
	// The file stays open between counts: each count reads it afresh.
	os.WriteFile(filepath.Join(v1["memory"], "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 6\n"), 0o644)
	if n := cg.oomKills(); n != 6 {
		t.Errorf("oom kills %d after a kill, want 6", n)
	}
}

func TestSlowCgroup2(t *testing.T) {
	const slow = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	if got := slowCgroup2(slow); got != "/sys/fs/cgroup/unified" {
		t.Errorf("without favordynmods: %q", got)
	}
	fast := strings.Replace(slow, "rw,nsdelegate", "rw,nsdelegate,favordynmods", 1)
	if got := slowCgroup2(fast); got != "" {
		t.Errorf("with favordynmods: %q", got)
	}
	if got := slowCgroup2("35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"); got != "" {
		t.Errorf("no cgroup2: %q", got)
	}
}

// TestCgroupsForLimits: a v1 pids or cpu cgroup only for its limit, the v1
// freezer only where cgroup2 cannot freeze, memory always (OOM counts).
func TestCgroupsForLimits(t *testing.T) {
	v2 := t.TempDir()
	withFreeze, without := &cgroups{v2: v2}, &cgroups{}
	os.WriteFile(filepath.Join(v2, "cgroup.freeze"), nil, 0o644)
	none, all := sandbox.Limits{}, sandbox.Limits{MemoryBytes: 1 << 30, Pids: 10, CPUs: 1}
	for _, c := range []struct {
		cg     *cgroups
		l      sandbox.Limits
		ctrl   string
		expect bool
	}{
		{withFreeze, none, "memory", true}, {withFreeze, none, "pids", false}, {withFreeze, none, "cpu", false},
		{withFreeze, all, "pids", true}, {withFreeze, all, "cpu", true},
		{withFreeze, none, "freezer", false}, {without, none, "freezer", true},
	} {
		if got := c.cg.needsV1(c.ctrl, c.l); got != c.expect {
			t.Errorf("%s for %+v (v2 freeze %v): %v", c.ctrl, c.l, c.cg.freezeV2(), got)
		}
	}
}
