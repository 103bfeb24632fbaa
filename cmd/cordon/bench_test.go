package main_test

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// BenchmarkRunTrue is what a user meets first: `cordon run -- true`, a
// fresh sandbox on the default tier from a cold command line to its exit,
// against `bwrap … true` in the same run. Besides p50 and p99 it reports
// the page faults of each run (the command and every process it waited
// for: the sandbox's init, agent and command), which the machine's noise
// does not move: on nested-virtualisation guests a fault costs some 10 µs,
// and starting Go programs is mostly faults.
func BenchmarkRunTrue(b *testing.B) {
	testutil.RequiresRoot(b)
	bwrap := testutil.Requires(b, "bwrap")[0]
	cli := buildCLI(b)
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"cordon", []string{cli, "run", "--", "true"}},
		{"bwrap", []string{bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"}},
		{"cordon-version", []string{cli, "version"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ds []time.Duration
			var faults int64
			for b.Loop() {
				cmd := exec.Command(c.argv[0], c.argv[1:]...)
				t0 := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %v\n%s", c.argv, err, out)
				}
				ds = append(ds, time.Since(t0))
				faults += cmd.ProcessState.SysUsage().(*syscall.Rusage).Minflt
			}
			testutil.ReportPercentiles(b, "", ds)
			b.ReportMetric(float64(faults)/float64(len(ds)), "faults/op")
		})
	}
}
