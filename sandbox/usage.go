package sandbox

import (
	"context"
	"fmt"
	"time"
)

// MemoryGauge is implemented by instances whose host counts the sandbox's
// memory (its memory cgroup).
type MemoryGauge interface {
	// MemoryInUse is the memory charged to the sandbox now, less the file
	// cache the kernel can reclaim; ok is false where it cannot be read.
	MemoryInUse() (bytes int64, ok bool)
}

// Usage is what a sandbox uses at one moment.
type Usage struct {
	At time.Time
	// CPU is the CPU time its commands have used since it started.
	CPU time.Duration
	// Tasks counts its commands' processes and threads now.
	Tasks int64
	// CPUs is how many CPUs they may run on (0: not said).
	CPUs int64
	// Memory is what it holds now, less reclaimable file cache; -1 where
	// neither its host nor its agent counts it.
	Memory int64
	// DiskUsed and DiskTotal are its writable space's use and size.
	DiskUsed, DiskTotal int64
	// OOMKills counts the processes killed for memory in it so far; -1
	// where it is not counted.
	OOMKills int64
}

// Usage asks the agent what the commands use (CPU, tasks, the writable
// space) and the host what the sandbox's memory is. An agent without
// feature "usage" is ErrUnsupported.
func (s *Sandbox) Usage(ctx context.Context) (*Usage, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	if !s.hasFeature("usage") {
		return nil, fmt.Errorf("%w: this sandbox's agent does not count usage", ErrUnsupported)
	}
	u, err := s.agent().Usage(ctx)
	if err != nil {
		return nil, err
	}
	out := &Usage{At: time.Now(), CPU: time.Duration(u.CPUNanos), Tasks: u.Tasks, CPUs: u.CPUs,
		DiskUsed: u.DiskUsedBytes, DiskTotal: u.DiskTotalBytes, Memory: -1, OOMKills: -1}
	if g, ok := s.inst.(MemoryGauge); ok {
		if m, ok := g.MemoryInUse(); ok {
			out.Memory = m
		}
	}
	if n, ok := s.OOMKills(); ok {
		out.OOMKills = int64(n)
	}
	if out.Memory < 0 && u.MemoryBytes > 0 {
		// The agent counts the sandbox's memory, and its OOM kills with
		// it, where the host cannot (a cluster's node, a VM's kernel).
		out.Memory, out.OOMKills = u.MemoryBytes, u.OOMKills
	}
	return out, nil
}
