package agent

import (
	"bytes"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/memcg"
)

// clockTick is the unit of the times in /proc/PID/stat (USER_HZ, 100 on
// every architecture Linux runs Go on, and in gVisor).
const clockTick = 10_000_000 // ns

// handleUsage answers GET /usage (feature "usage").
func (s *Server) handleUsage(w httpd.ResponseWriter, r *httpd.Request) {
	u := wire.Usage{}
	u.CPUNanos, u.Tasks = processTimes(os.Getpid())
	u.CPUs = int64(runtime.NumCPU())
	var st unix.Statfs_t
	if unix.Statfs(s.cfg.Workspace, &st) == nil {
		u.DiskTotalBytes = int64(st.Blocks) * st.Bsize
		u.DiskUsedBytes = int64(st.Blocks-st.Bfree) * st.Bsize
	}
	u.MemoryBytes, u.OOMKills = s.memoryInUse(), s.oomKills()
	writeJSON(w, httpd.StatusOK, u)
}

// processTimes sums, over self (the agent) and its descendants, the CPU
// time the descendants and the children each reaped used, and counts the
// descendants' threads. Every process that ever ran below self is in
// exactly one of those sums: a process's time passes to its parent's
// children's time when the parent reaps it, and the agent is the
// sandbox's init, or the subreaper of its commands' orphans. (Where the
// agent is PID 1, every process in /proc is one of them; where it shares
// the host's PID namespace, /proc holds others, which are not counted.)
func processTimes(self int) (cpuNanos, tasks int64) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	type proc struct{ ppid, own, reaped, threads int64 }
	procs := make(map[int64]proc, len(names))
	for _, name := range names {
		pid, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // it ended meanwhile
		}
		// The fields after the command's name, which may hold anything,
		// up to its closing parenthesis: state is the first.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 18 {
			continue
		}
		n := func(j int) int64 { v, _ := strconv.ParseInt(string(f[j]), 10, 64); return v }
		procs[pid] = proc{ppid: n(1), own: n(11) + n(12), reaped: n(13) + n(14), threads: n(17)}
	}
	// below reports whether pid descends from self, remembering each
	// answer (a chain is walked once).
	known := map[int64]bool{int64(self): true}
	var below func(pid int64, depth int) bool
	below = func(pid int64, depth int) bool {
		if v, ok := known[pid]; ok {
			return v
		}
		p, ok := procs[pid]
		v := ok && depth < len(procs) && p.ppid != pid && below(p.ppid, depth+1)
		known[pid] = v
		return v
	}
	var ticks int64
	for pid, p := range procs {
		switch {
		case pid == int64(self):
			ticks += p.reaped
		case below(pid, 0):
			ticks += p.own + p.reaped
			tasks += p.threads
		}
	}
	return ticks * clockTick, tasks
}

// memoryInUse is the sandbox's memory, where the agent counts it
// (Config.CountOOM: a pod's memory cgroup, as the runtime mounts it, v2
// then v1; OOMKernels: a virtual machine's whole kernel), less the file
// cache the kernel can reclaim; else 0.
func (s *Server) memoryInUse() int64 {
	if !s.cfg.CountOOM {
		return 0
	}
	if s.cfg.OOMKernels {
		m := memcg.Fields("/proc/meminfo", ":")
		return max(m["MemTotal"]-m["MemAvailable"], 0) << 10 // kB
	}
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/memory"} {
		if n, ok := memcg.InUse(dir); ok {
			return n
		}
	}
	return 0
}
