package host

import (
	"errors"
	"fmt"
	"io/fs"
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

// TierTasks is how many processes and threads one tier's sandboxes may
// hold together on this host: half of what is left of the kernel's task
// ids (kernel.pid_max, or kernel.threads-max where lower) once a quarter,
// and at least 1024, is kept for the host. Each sandbox has a pids limit of
// its own (1024 by the daemon's default) but a tenant may hold a hundred
// sandboxes: without a bound above them, some thirty fork bombs at their
// limits took every pid of a host with the kernel's default pid_max of
// 32768, and nothing else on it could fork.
func TierTasks() int64 {
	n := min(readCount("/proc/sys/kernel/pid_max"), readCount("/proc/sys/kernel/threads-max"))
	return max((n-max(n/4, 1024))/2, 1024)
}

func readCount(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 1 << 22 // the most pid_max may be
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return 1 << 22
	}
	return n
}

// TierParent is the cgroup named name at the root of the host's hierarchy
// of controller (v1's, else a unified cgroup2 that has the controller), ""
// where there is none.
func TierParent(controller, name string) string {
	var st unix.Statfs_t
	if root := filepath.Join("/sys/fs/cgroup", controller); unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
		return filepath.Join(root, name)
	}
	if ctrl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && unix.Statfs("/sys/fs/cgroup", &st) == nil &&
		st.Type == unix.CGROUP2_SUPER_MAGIC && slices.Contains(strings.Fields(string(ctrl)), controller) {
		return filepath.Join("/sys/fs/cgroup", name)
	}
	return ""
}

// BoundTasks gives dir, a pids cgroup above a tier's sandboxes' own, the
// bound limit where it has none, making it first; a bound already there
// (an operator's) stays.
func BoundTasks(dir string, limit int64) error { return bound(dir, limit, "pids.max") }

// BoundMemory is BoundTasks for a memory cgroup (v1's
// memory.limit_in_bytes, else cgroup2's memory.max).
func BoundMemory(dir string, limit int64) error {
	return bound(dir, limit, "memory.limit_in_bytes", "memory.max")
}

// bound writes limit to the first of files dir has, where that holds no
// bound ("max", or v1's largest number).
func bound(dir string, limit int64, files ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range files {
		f := filepath.Join(dir, name)
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		v := strings.TrimSpace(string(b))
		if n, err := strconv.ParseInt(v, 10, 64); v != "max" && (err != nil || n < 1<<62) {
			return nil
		}
		return os.WriteFile(f, []byte(strconv.FormatInt(limit, 10)), 0)
	}
	return fmt.Errorf("%s has none of %v", dir, files)
}

// TierMemory is how much memory one tier's sandboxes may hold together:
// the host's, less a quarter (at least 1 GiB) kept for the host. Kernel
// memory a sandbox's open files hold (a pipe's buffers, sockets) counts
// in its memory cgroup but in no process's size, so without a bound above
// the sandboxes, one without a memory limit of its own could fill the
// host and have its OOM killer pick the host's processes, the daemon
// among them, rather than its own.
func TierMemory() int64 {
	total := int64(1) << 40
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					total = kb << 10
				}
			}
		}
	}
	// Whole MiB: a memory cgroup rounds a limit to its pages.
	return max(total-max(total/4, 1<<30), 256<<20) &^ (1<<20 - 1)
}
