package testutil

import (
	"slices"
	"testing"
	"time"
)

// ReportPercentiles reports the p50 and p99 of d in milliseconds, as
// name-p50-ms and name-p99-ms (p50-ms and p99-ms when name is empty).
// Benchmarks report these rather than ns/op: on shared machines a mean
// hides the spread, and timings are never asserted.
func ReportPercentiles(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	d = slices.Sorted(slices.Values(d))
	at := func(q float64) float64 { return float64(quantile(d, q).Microseconds()) / 1000 }
	if name != "" {
		name += "-"
	}
	b.ReportMetric(at(0.5), name+"p50-ms")
	b.ReportMetric(at(0.99), name+"p99-ms")
}

// Quantile is the q quantile (0.5 for the median) of d.
func Quantile(d []time.Duration, q float64) time.Duration {
	return quantile(slices.Sorted(slices.Values(d)), q)
}

// quantile is Quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}
