package main_test

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// BenchmarkRunTrue is what a user meets first: `cordon run -- true`, a
// fresh sandbox on the default tier from a cold command line to its exit,
// against `bwrap … true` in the same run, and through a local daemon with
// its started inits (`--host`). Runs are 150 ms apart, as a person or an
// agent framework runs commands, so the daemon's pool refills between them.
// Besides p50 and p99 it reports the page faults of each run (the command
// and every process it waited for: for a daemonless run the sandbox's
// init, agent and command), which the machine's noise does not move: on
// nested-virtualisation guests a fault costs some 10 µs, and starting Go
// programs is mostly faults.
func BenchmarkRunTrue(b *testing.B) {
	testutil.RequiresRoot(b)
	bwrap := testutil.Requires(b, "bwrap")[0]
	cli := buildCLI(b)
	_, sock, d := serveInTemp(b)
	defer d.stop(b, sock)
	// A warm pool of the spec `cordon run --host -- CMD` asks for: a create
	// then claims a started sandbox.
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.PutPool(b.Context(), "default", api.Spec{}, 2); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"cordon", []string{cli, "run", "--", "true"}},
		{"cordon-host-pool", []string{cli, "run", "--host=unix://" + sock, "--", "true"}},
		{"cordon-host", []string{cli, "run", "--host=unix://" + sock, "--env", "X=1", "--", "true"}},
		{"bwrap", []string{bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"}},
		{"cordon-version", []string{cli, "version"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ds []time.Duration
			var faults int64
			for b.Loop() {
				b.StopTimer()
				time.Sleep(150 * time.Millisecond)
				b.StartTimer()
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
