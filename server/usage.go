package server

import (
	"context"
	"net/http"
	"runtime"
	"time"

	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
)

// usageTimeout bounds the agent's count of what the sandbox uses, which
// reads every process's times.
const usageTimeout = 10 * time.Second

// minCPUWindow is the least time the CPU's use is measured over since
// the previous read of the metrics: a read sooner after it measures from
// the sandbox's create, and does not become the previous read.
const minCPUWindow = 100 * time.Millisecond

// handleMetrics answers GET /v1/sandboxes/ID/metrics. Reading them is not
// activity: it keeps no idle sandbox alive.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok || !s.running(w, e) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), usageTimeout)
	defer cancel()
	u, err := e.sb.Usage(ctx)
	if err != nil {
		writeErr(w, err)
		return
	}
	s.mu.Lock()
	created := e.rec.CreatedAt
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, metricsOf(e.sb.Spec().Limits, u, e.usage.Load(), created))
	e.noteUsage(u)
}

// metricsOf describes u against limits; the CPU's use is measured from
// prev, when one was read at least 100 ms before, else from created.
func metricsOf(limits sandbox.Limits, u, prev *sandbox.Usage, created time.Time) api.Metrics {
	m := api.Metrics{
		Timestamp: u.At.UTC(), CPUSeconds: u.CPU.Round(time.Millisecond).Seconds(), CPUCount: limits.CPUs,
		MemoryLimitBytes: limits.MemoryBytes, DiskUsedBytes: u.DiskUsed, DiskTotalBytes: u.DiskTotal,
		Tasks: u.Tasks, TasksLimit: limits.Pids,
	}
	// A limit above the CPUs the sandbox may run on (a virtual machine's
	// own, a cpuset) is not what it can use.
	if u.CPUs > 0 && (m.CPUCount <= 0 || float64(u.CPUs) < m.CPUCount) {
		m.CPUCount = float64(u.CPUs)
	}
	if m.CPUCount <= 0 {
		m.CPUCount = float64(runtime.NumCPU())
	}
	if u.Memory >= 0 {
		m.MemoryBytes = &u.Memory
	}
	if u.OOMKills >= 0 {
		m.OOMKills = &u.OOMKills
	}
	from, used := created, u.CPU
	if prev != nil && u.At.Sub(prev.At) >= minCPUWindow {
		from, used = prev.At, u.CPU-prev.CPU
	}
	m.CPUUsedPct = api.CPUUsedPct(used, u.At.Sub(from), m.CPUCount)
	return m
}
