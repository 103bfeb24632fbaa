package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// pidsV1 is the host's cgroup v1 pids hierarchy, "" where there is none
// (unified cgroup2).
var pidsV1 = sync.OnceValue(func() string {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup/pids", &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
		return "/sys/fs/cgroup/pids"
	}
	return ""
})

// commandsApart reports whether a sandbox of l has its workload's pids held
// apart from its agent's (holdCommands): under a pids limit, on runc and
// crun, where the host's cgroups are v1 (a single thread can be moved into
// a v1 pids cgroup; cgroup2 would need a threaded subtree, which the
// machines this is tested on cannot make). Elsewhere the workload shares
// the cgroup's limit with the agent's headroom, and the agent keeps spare
// threads against a fork bomb.
func (b *Backend) commandsApart(l sandbox.Limits) bool {
	return l.Pids > 0 && !b.gvisor() && pidsV1() != ""
}

// holdCommands moves the agent's command thread (the one named
// sandboxinit.CommandThreadName among init's threads, else its first)
// into a pids cgroup
// of limit below the container's: every command and all it starts count
// there, so the workload has exactly its limit, and a fork bomb cannot
// take the agent's headroom.
func holdCommands(cgroup string, init int, limit int64) error {
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
	dir := filepath.Join(pidsV1(), cgroup, "commands")
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
