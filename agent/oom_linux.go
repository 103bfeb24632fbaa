package agent

import (
	"bytes"
	"os"
	"strconv"
)

// The sandbox's memory cgroup's count of OOM kills, as the container
// runtime mounts it (cgroup v2, then v1's memory hierarchy).
var oomFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// oomKills is the sandbox's OOM kills so far, where the agent counts them
// (Config.CountOOM: a host that cannot read the sandbox's memory cgroup,
// a cluster's node being another machine), else 0.
func (s *Server) oomKills() int64 {
	if !s.cfg.CountOOM {
		return 0
	}
	files := oomFiles
	if s.cfg.OOMKernels {
		files = []string{"/proc/vmstat"}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
				// (memory.events and /proc/vmstat; memory.oom_control
				// says the same.)
				n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
				return n
			}
		}
	}
	return 0
}
