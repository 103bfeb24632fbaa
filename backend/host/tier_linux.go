package host

// The bounds above all of one tier's sandboxes: what they may hold of the
// host's task ids and memory together, whatever each one's own limits.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// TierTasks is how many processes and threads one tier's sandboxes may
// hold together on this host: half of what is left of the kernel's task
// ids (kernel.pid_max, or kernel.threads-max where lower) once a quarter,
// and at least 1024, is kept for the host. Each sandbox has a pids limit of
// its own (1024 by the daemon's default) but a tenant may hold a hundred
// sandboxes: without a bound above them, some thirty fork bombs at their
// limits would take every pid of a host with the kernel's default pid_max
// of 32768, and nothing else on it could fork.
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

// ContainersCgroup is the cgroup, at the root of each hierarchy, that the
// container tiers' sandboxes are made below: crun's, runc's and runsc's,
// and the docker engine's where it manages cgroups itself (its cgroupfs
// driver). Together they hold TierTasks and TierMemory (BoundContainers),
// as the process tier's sandboxes hold their own.
const ContainersCgroup = "cordon-oci"

// BoundContainers gives ContainersCgroup, in the pids and memory
// hierarchies, the bounds TierTasks and TierMemory where it has none.
// Where they cannot be set, each sandbox's own limits are all there is.
func BoundContainers() {
	if dir := TierParent("pids", ContainersCgroup); dir != "" {
		_ = BoundTasks(dir, TierTasks())
	}
	if dir := TierParent("memory", ContainersCgroup); dir != "" {
		_ = BoundMemory(dir, TierMemory())
	}
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
