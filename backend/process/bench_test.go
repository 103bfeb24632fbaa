//go:build linux

package process_test

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

func benchProvider(b *testing.B, limits, spawner bool, prestart ...int) (*sandbox.Provider, sandbox.Spec) {
	spec := sandbox.Spec{}
	if limits {
		spec.Limits = sandbox.Limits{MemoryBytes: 256 << 20, Pids: 256}
	}
	return sandbox.NewProvider([]sandbox.Backend{benchBackend(b, spawner, prestart...)}), spec
}

func benchBackend(b *testing.B, spawner bool, prestart ...int) *process.Backend {
	testutil.RequiresRoot(b)
	cfg := process.Config{AgentPath: testutil.BuildAgent(b), Spawner: spawner}
	if len(prestart) > 0 {
		cfg.Prestart = prestart[0]
	}
	be := process.New(cfg)
	b.Cleanup(func() { be.Close() })
	if err := be.Probe(context.Background()); err != nil {
		testutil.Missing(b, "process tier unavailable: %v", err)
	}
	return be
}

// BenchmarkLifecycle: create → first exec result → destroy, per phase.
// The Host100MB cases hold 100 MB of written memory in this process while
// they run, as a daemon serving many sandboxes does: a fork that makes a
// user namespace costs more the more memory its parent holds, which the
// spawner takes out of the path (and a host past SpawnerRSS uses it
// without being asked, so both cases now go through it). Without Spawner
// only the first create forks from this process: the helper serves the
// rest once the second has started it.
func BenchmarkLifecycle(b *testing.B) {
	for _, c := range []struct {
		name     string
		limits   bool
		prestart int
		spawner  bool
		hostMB   int
	}{
		{"NoLimits", false, 0, false, 0}, {"WithLimits", true, 0, false, 0},
		{"NoLimitsSpawner", false, 0, true, 0}, {"WithLimitsSpawner", true, 0, true, 0},
		{"NoLimitsHost100MB", false, 0, false, 100}, {"NoLimitsHost100MBSpawner", false, 0, true, 100},
	} {
		b.Run(c.name, func(b *testing.B) {
			held := make([]byte, c.hostMB<<20)
			for i := range held {
				held[i] = 1
			}
			defer runtime.KeepAlive(held)
			p, spec := benchProvider(b, c.limits, c.spawner, c.prestart)
			ctx := context.Background()
			var create, exec, second, destroy, first []time.Duration
			for b.Loop() {
				t0 := time.Now()
				sb, err := p.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				res, err := sb.Exec(ctx, "true", sandbox.ExecOptions{})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
				t2 := time.Now()
				// A second command: what the first paid for being first.
				if res, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil || res.ExitCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
				t3 := time.Now()
				if err := sb.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
				t4 := time.Now()
				create, exec, second, destroy, first = append(create, t1.Sub(t0)), append(exec, t2.Sub(t1)), append(second, t3.Sub(t2)), append(destroy, t4.Sub(t3)), append(first, t2.Sub(t0))
			}
			testutil.ReportPercentiles(b, "create", create)
			testutil.ReportPercentiles(b, "exec", exec)
			testutil.ReportPercentiles(b, "second-exec", second)
			testutil.ReportPercentiles(b, "destroy", destroy)
			testutil.ReportPercentiles(b, "create-to-result", first)
		})
	}
}

// BenchmarkConcurrentCreate: 50 sandboxes created at once.
func BenchmarkConcurrentCreate(b *testing.B) {
	p, spec := benchProvider(b, true, false)
	ctx := context.Background()
	var all []time.Duration
	var wall []time.Duration
	for b.Loop() {
		start := time.Now()
		var mu sync.Mutex
		var wg sync.WaitGroup
		sbs := make([]*sandbox.Sandbox, 50)
		for i := range sbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				sb, err := p.Create(ctx, spec)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil {
					b.Error(err)
				}
				mu.Lock()
				all = append(all, time.Since(t0))
				mu.Unlock()
				sbs[i] = sb
			}()
		}
		wg.Wait()
		wall = append(wall, time.Since(start))
		for _, sb := range sbs {
			if sb != nil {
				if err := sb.Destroy(ctx); err != nil {
					b.Error(err)
				}
			}
		}
	}
	testutil.ReportPercentiles(b, "create-to-result", all)
	testutil.ReportPercentiles(b, "all-50", wall)
}

// baselines are the same "start a namespaced process and run true" with
// bubblewrap and unshare(1).
var baselines = []struct {
	name string
	argv []string
}{
	{"bwrap", []string{"bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"}},
	{"unshare", []string{"unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net", "--ipc", "--uts", "--mount-proc", "true"}},
}

// BenchmarkBaselines runs the baselines, for comparison in the same run.
func BenchmarkBaselines(b *testing.B) {
	testutil.RequiresRoot(b)
	for _, c := range baselines {
		b.Run(c.name, func(b *testing.B) {
			testutil.Requires(b, c.argv[0])
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if out, err := exec.Command(c.argv[0], c.argv[1:]...).CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				d = append(d, time.Since(t0))
			}
			testutil.ReportPercentiles(b, "run", d)
		})
	}
}

// BenchmarkVersusBwrap: create → first exec result (then destroy,
// untimed) and a bwrap run of true, one after the other in every
// iteration, so that both see the same moments of a noisy machine; it
// reports both p50s and their ratio (the goal: within 1.5×).
func BenchmarkVersusBwrap(b *testing.B) {
	bwrap := baselines[0].argv
	testutil.Requires(b, bwrap[0])
	p, spec := benchProvider(b, false, false)
	ctx := context.Background()
	var cordon, bw []time.Duration
	for b.Loop() {
		sb, d := firstResult(b, p, spec)
		cordon = append(cordon, d)
		b.StopTimer()
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t1 := time.Now()
		if out, err := exec.Command(bwrap[0], bwrap[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		bw = append(bw, time.Since(t1))
	}
	testutil.ReportPercentiles(b, "create-to-result", cordon)
	testutil.ReportPercentiles(b, "bwrap", bw)
	median := func(d []time.Duration) float64 { return float64(slices.Sorted(slices.Values(d))[len(d)/2]) }
	b.ReportMetric(median(cordon)/median(bw), "ratio-p50")
}

// firstResult creates a sandbox and runs true in it, and returns the
// sandbox and the time from the call to the command's result.
func firstResult(b *testing.B, p *sandbox.Provider, spec sandbox.Spec) (*sandbox.Sandbox, time.Duration) {
	ctx := context.Background()
	t0 := time.Now()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	if res, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil || res.ExitCode != 0 {
		b.Fatalf("%+v %v", res, err)
	}
	return sb, time.Since(t0)
}

// BenchmarkLayout: create → first exec result → destroy with all six
// layout directories (each an id-mapped mount).
func BenchmarkLayout(b *testing.B) {
	p, spec := benchProvider(b, false, false)
	dirs := make([]string, 6)
	for i := range dirs {
		dirs[i] = b.TempDir()
	}
	spec.Layout = sandbox.Layout{Outputs: dirs[0], Uploads: dirs[1], Scratch: dirs[2], ToolResults: dirs[3], Transcripts: dirs[4], Skills: dirs[5]}
	ctx := context.Background()
	var first []time.Duration
	for b.Loop() {
		sb, d := firstResult(b, p, spec)
		first = append(first, d)
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
	}
	testutil.ReportPercentiles(b, "create-to-result", first)
}

// BenchmarkSpaced: create → first result with 150 ms of idle before each
// create (untimed), as sporadic creates come, cold and from 2 prestarted
// inits (which refill in such pauses), through the spawner as the daemon
// runs the tier.
func BenchmarkSpaced(b *testing.B) {
	for _, pre := range []int{0, 2} {
		b.Run(map[int]string{0: "Cold", 2: "Prestart2"}[pre], func(b *testing.B) {
			p, spec := benchProvider(b, false, true, pre)
			ctx := context.Background()
			var create, first []time.Duration
			for b.Loop() {
				b.StopTimer()
				time.Sleep(150 * time.Millisecond)
				b.StartTimer()
				t0 := time.Now()
				sb, err := p.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if res, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil || res.ExitCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
				create, first = append(create, t1.Sub(t0)), append(first, time.Since(t0))
				if err := sb.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
			}
			testutil.ReportPercentiles(b, "create", create)
			testutil.ReportPercentiles(b, "create-to-result", first)
		})
	}
}

// BenchmarkExecWarm: commands into one running sandbox, through the SDK
// (which also counts OOM kills around each) and through the agent client
// alone.
func BenchmarkExecWarm(b *testing.B) {
	p, spec := benchProvider(b, false, false)
	sb, err := p.Create(context.Background(), spec)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	for _, c := range []struct {
		name string
		exec func() error
	}{
		{"SDK", func() error {
			res, err := sb.Exec(context.Background(), "true", sandbox.ExecOptions{})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
			return err
		}},
		{"Client", func() error {
			res, err := sb.Client().Exec(context.Background(), "true", client.ExecOptions{})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := c.exec(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			testutil.ReportPercentiles(b, "exec", lat)
		})
	}
}

// BenchmarkWarmSandbox: what a running sandbox's agent does besides
// starting commands. Download reads a 16 MiB file out of the sandbox;
// Output runs a command that writes 16 MiB to its standard output; Parallel
// runs four commands at once.
func BenchmarkWarmSandbox(b *testing.B) {
	p, spec := benchProvider(b, false, false)
	ctx := context.Background()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	const size = 16 << 20
	if res, err := sb.Exec(ctx, "sh", sandbox.ExecOptions{Args: []string{"-c", fmt.Sprintf("head -c %d /dev/urandom > /tmp/blob", size)}}); err != nil || res.ExitCode != 0 {
		b.Fatalf("%+v %v", res, err)
	}
	b.Run("Download", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if n, err := sb.Download(ctx, "/tmp/blob", 0, size, new(discard)); err != nil || n != size {
				b.Fatalf("%d %v", n, err)
			}
		}
	})
	b.Run("Output", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			res, err := sb.Exec(ctx, "cat", sandbox.ExecOptions{Args: []string{"/tmp/blob"}, Stdout: new(discard), RawOutput: true, MaxOutputBytes: size})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			t0 := time.Now()
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					if res, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil || res.ExitCode != 0 {
						b.Errorf("%+v %v", res, err)
					}
				})
			}
			wg.Wait()
			lat = append(lat, time.Since(t0))
		}
		testutil.ReportPercentiles(b, "four", lat)
	})
}

// discard counts nothing and keeps nothing.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
