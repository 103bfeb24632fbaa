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
// against `bwrap … true`, and through a local daemon with its started
// inits (`--host`). Runs are 150 ms apart, as a person or an agent
// framework runs commands, so the daemon's pool refills between them.
//
// "vs-bwrap" alternates the two, a run of each per iteration in turns, and
// reports each one's p50 and their ratio (the goal is at most 2): the
// machine's speed drifts by a tenth within minutes, which separate
// sub-benchmarks would read as a difference between the programs. The
// binaries are installed as scripts/setup.sh installs them
// (testutil.BuildCordon).
//
// Each also reports the page faults of a run (the command and every
// process it waited for: for a daemonless run the sandbox's init, agent
// and command), which the machine's noise does not move: starting Go
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
	type run struct {
		name   string
		argv   []string
		ds     []time.Duration
		faults int64
	}
	once := func(b *testing.B, r *run) {
		b.StopTimer()
		time.Sleep(150 * time.Millisecond)
		b.StartTimer()
		cmd := exec.Command(r.argv[0], r.argv[1:]...)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", r.argv, err, out)
		}
		r.ds = append(r.ds, time.Since(t0))
		r.faults += cmd.ProcessState.SysUsage().(*syscall.Rusage).Minflt
	}
	report := func(b *testing.B, r *run, name string) {
		testutil.ReportPercentiles(b, name, r.ds)
		if name != "" {
			name += "-"
		}
		b.ReportMetric(float64(r.faults)/float64(len(r.ds)), name+"faults/op")
	}
	b.Run("vs-bwrap", func(b *testing.B) {
		runs := [2]*run{{argv: []string{cli, "run", "--", "true"}}, {argv: []string{bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"}}}
		i := 0
		for b.Loop() {
			once(b, runs[i%2])
			once(b, runs[(i+1)%2])
			i++
		}
		report(b, runs[0], "cordon")
		report(b, runs[1], "bwrap")
		b.ReportMetric(float64(testutil.Quantile(runs[0].ds, 0.5))/float64(testutil.Quantile(runs[1].ds, 0.5)), "ratio")
	})
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"cordon-host-pool", []string{cli, "run", "--host=unix://" + sock, "--", "true"}},
		{"cordon-host", []string{cli, "run", "--host=unix://" + sock, "--env", "X=1", "--", "true"}},
		{"cordon-version", []string{cli, "version"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := &run{argv: c.argv}
			for b.Loop() {
				once(b, r)
			}
			report(b, r, "")
		})
	}
}
