package host

import (
	"fmt"
	"github.com/cordon-sandbox/cordon/internal/memcg"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/baseline"
	"golang.org/x/sys/unix"
)

// PidsV1 is the host's cgroup v1 pids hierarchy, "" where there is none
// (unified cgroup2).
var PidsV1 = sync.OnceValue(func() string {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup/pids", &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
		return "/sys/fs/cgroup/pids"
	}
	return ""
})

// HoldCommands moves the agent's command thread (the one named
// sandboxinit.CommandThreadName among init's threads, else its first)
// into a pids cgroup
// of limit below the container's: every command and all it starts count
// there, so the workload has exactly its limit, and a fork bomb cannot
// take the agent's headroom.
func HoldCommands(cgroup string, init int, limit int64) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", init))
	if err != nil {
		return fmt.Errorf("the agent's threads: %w", err)
	}
	tid := strconv.Itoa(init) // the first thread, unless another is named
	for _, t := range tasks {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", init, t.Name())); err == nil && strings.TrimSpace(string(comm)) == sandboxinit.CommandThreadName {
			tid = t.Name()
		}
	}
	dir := filepath.Join(PidsV1(), cgroup, "commands")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("the commands' pids cgroup: %w", err)
	}
	for _, w := range [][2]string{{"pids.max", strconv.FormatInt(limit, 10)}, {"tasks", tid}} {
		if err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0); err != nil {
			return fmt.Errorf("the commands' pids cgroup: %s: %w", w[0], err)
		}
	}
	return nil
}

// ThreadOf is the host's id of the thread of process pid whose id in the
// process's own PID namespace is tid (the last of its status's NSpid).
func ThreadOf(pid, tid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, fmt.Errorf("the threads of process %d: %w", pid, err)
	}
	want := strconv.Itoa(tid)
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == want {
				return strconv.Atoi(t.Name())
			}
		}
	}
	return 0, fmt.Errorf("process %d has no thread %d in its PID namespace", pid, tid)
}

// CgroupOf is the path of pid's cgroup in the v1 hierarchy of controller
// (below /sys/fs/cgroup/CONTROLLER), as /proc says.
func CgroupOf(pid int, controller string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("process %d is in no %s cgroup", pid, controller)
}

// OOMKills counts the OOM kills in a memory cgroup (its path below the
// hierarchy: cgroup v1's memory.oom_control, or v2's memory.events).
func OOMKills(cgroup string) uint64 {
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", cgroup, "memory.oom_control"),
		filepath.Join("/sys/fs/cgroup", cgroup, "memory.events"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
				n, _ := strconv.ParseUint(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

// MemoryInUse is the memory charged to a memory cgroup (its path below the
// hierarchy, v1's or v2's) now, less the inactive file cache the kernel
// can reclaim, as docker stats counts it; ok is false where the cgroup
// cannot be read.
func MemoryInUse(cgroup string) (int64, bool) {
	if n, ok := memcg.InUse(filepath.Join("/sys/fs/cgroup/memory", cgroup)); ok {
		return n, ok
	}
	return memcg.InUse(filepath.Join("/sys/fs/cgroup", cgroup))
}

// TCPMemoryV1 reports whether the host's memory cgroups are v1 with TCP
// accounting, which a sandbox's cgroup takes a bound of its own for
// (memory.kmem.tcp.limit_in_bytes, baseline.TCPBytes).
func TCPMemoryV1() bool {
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.kmem.tcp.limit_in_bytes")
	return err == nil
}

// BoundTCP gives a sandbox's v1 memory cgroup (its path below the
// hierarchy, CgroupOf) its bound on TCP memory, for a runtime that sets
// none itself; on a host without v1's TCP accounting it does nothing.
func BoundTCP(memcg string) error {
	if !TCPMemoryV1() {
		return nil
	}
	if memcg == "" {
		return fmt.Errorf("the sandbox's TCP memory: its memory cgroup is unknown")
	}
	f := filepath.Join("/sys/fs/cgroup/memory", memcg, "memory.kmem.tcp.limit_in_bytes")
	if err := os.WriteFile(f, []byte(strconv.Itoa(baseline.TCPBytes)), 0); err != nil {
		return fmt.Errorf("the sandbox's TCP memory: %w", err)
	}
	return nil
}
