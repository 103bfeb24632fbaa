//go:build linux

package docker_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
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
// first exec's result.
func BenchmarkConcurrentCreates(b *testing.B) {
	sandboxtest.BenchConcurrentCreates(b, backendTB(b), 50)
}
