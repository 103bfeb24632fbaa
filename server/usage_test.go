package server

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// TestMetricsOf: the cores a sandbox's CPU use is measured against are its
// limit, or the CPUs it may run on where they are fewer (a single-CPU
// virtual machine on a larger host), else the host's; the use is over the
// time since the previous read, or since the create when there is none or
// it is too recent.
func TestMetricsOf(t *testing.T) {
	created := time.Unix(1000, 0)
	now := created.Add(10 * time.Second)
	at := func(d time.Duration, cpu time.Duration, cpus int64) *sandbox.Usage {
		return &sandbox.Usage{At: created.Add(d), CPU: cpu, CPUs: cpus, Memory: -1, OOMKills: -1}
	}
	cases := []struct {
		name      string
		limit     float64
		u, prev   *sandbox.Usage
		count, pc float64
	}{
		{"a VM of one CPU, no limit", 0, at(10*time.Second, 5*time.Second, 1), nil, 1, 50},
		{"a limit above the VM's CPUs", 4, at(10*time.Second, 5*time.Second, 1), nil, 1, 50},
		{"a limit below them", 0.5, at(10*time.Second, 5*time.Second, 2), nil, 0.5, 100},
		{"since the previous read", 2, at(10*time.Second, 5*time.Second, 2), at(9*time.Second, 4500*time.Millisecond, 2), 2, 25},
		{"a previous read too recent: since the create", 2, at(10*time.Second, 5*time.Second, 2), at(9950*time.Millisecond, 0, 2), 2, 25},
		{"no count of CPUs: the host's", 0, at(10*time.Second, 0, 0), nil, float64(runtime.NumCPU()), 0},
	}
	for _, c := range cases {
		m := metricsOf(sandbox.Limits{CPUs: c.limit}, c.u, c.prev, created)
		if m.CPUCount != c.count || m.CPUUsedPct != c.pc || m.MemoryBytes != nil || m.OOMKills != nil || !m.Timestamp.Equal(now) {
			t.Errorf("%s: count %v, %v%% (memory %v, OOM kills %v); want %v, %v%%", c.name, m.CPUCount, m.CPUUsedPct, m.MemoryBytes, m.OOMKills, c.count, c.pc)
		}
	}
}

// TestHistory: a sandbox's readings keep the last of them, oldest first;
// a window's are those in it, with the one before it, which the first
// one's CPU use is measured from.
func TestHistory(t *testing.T) {
	base := time.Unix(1000, 0)
	var h history
	for i := range 7 {
		h.add(&sandbox.Usage{At: base.Add(time.Duration(i) * time.Second)}, 5)
	}
	secs := func(us []*sandbox.Usage) (out []int) {
		for _, u := range us {
			out = append(out, int(u.At.Sub(base)/time.Second))
		}
		return out
	}
	before, in := h.between(time.Time{}, base.Add(time.Hour))
	if before != nil || fmt.Sprint(secs(in)) != "[2 3 4 5 6]" {
		t.Fatalf("all kept: before %v, %v", before, secs(in))
	}
	before, in = h.between(base.Add(3500*time.Millisecond), base.Add(5*time.Second))
	if before == nil || before.At != base.Add(3*time.Second) || fmt.Sprint(secs(in)) != "[4 5]" {
		t.Fatalf("from 3.5 s to 5 s: before %v, %v", before, secs(in))
	}
	if _, in = h.between(base.Add(10*time.Second), base.Add(11*time.Second)); len(in) != 0 {
		t.Fatalf("a window after the last: %v", secs(in))
	}
}
