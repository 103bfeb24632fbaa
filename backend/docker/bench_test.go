//go:build linux

package docker_test

import (
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
)

// Benchmarks of the docker tier against the engine's own path, in one
// run (-benchtime 30x): create → first exec of `true` → destroy through
// cordon, `docker run --rm` of /bin/true with the same isolation flags
// that matter to its cost (no network, read-only root, no capabilities),
// exec into a warm sandbox, and 50 creates at once. Each reports p50 and
// p99 (ms).

func BenchmarkLifecycle(b *testing.B) { sandboxtest.BenchLifecycle(b, backendTB(b)) }

// BenchmarkDockerRun is the raw path: the docker CLI running /bin/true
// in a container it removes, from start to exit.
func BenchmarkDockerRun(b *testing.B) {
	backendTB(b) // the engine and its image
	var runs []time.Duration
	for b.Loop() {
		t0 := time.Now()
		cmd := exec.Command("docker", "run", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", testImage, "/bin/true")
		cmd.Env = append(cmd.Environ(), "DOCKER_HOST="+engine.Host)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		runs = append(runs, time.Since(t0))
	}
	testutil.ReportPercentiles(b, "total", runs)
}

func BenchmarkExecWarm(b *testing.B) { sandboxtest.BenchExecWarm(b, backendTB(b)) }

// BenchmarkConcurrentCreates: 50 sandboxes created at once, each to its
// first exec's result; the wall time of the whole, and each create's.
func BenchmarkConcurrentCreates(b *testing.B) {
	be := backendTB(b)
	p := sandbox.NewProvider([]sandbox.Backend{be})
	const n = 50
	var walls, each []time.Duration
	var mu sync.Mutex
	for b.Loop() {
		t0 := time.Now()
		var wg sync.WaitGroup
		sbs := make([]*sandbox.Sandbox, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := time.Now()
				sb, err := p.Create(b.Context(), sandbox.Spec{})
				if err == nil {
					_, err = sb.Exec(b.Context(), "true", sandbox.ExecOptions{})
				}
				sbs[i], errs[i] = sb, err
				mu.Lock()
				each = append(each, time.Since(s))
				mu.Unlock()
			}()
		}
		wg.Wait()
		walls = append(walls, time.Since(t0))
		b.StopTimer()
		for i, sb := range sbs {
			if sb != nil {
				_ = sb.Destroy(b.Context())
			}
			if errs[i] != nil {
				b.Fatal(errs[i])
			}
		}
		b.StartTimer()
	}
	testutil.ReportPercentiles(b, "wall", walls)
	testutil.ReportPercentiles(b, "each", each)
}
