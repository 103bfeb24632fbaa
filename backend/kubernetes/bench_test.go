//go:build linux

package kubernetes_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
)

// Benchmarks of the kubernetes tier against the cluster's own path, in
// one run (-benchtime 10x): create → first exec of `true` → destroy
// through cordon; a bare pod of the same image created, waited for and
// exec'd with kubectl; exec into a warm sandbox (the agent answers on the
// pod network, kubectl exec is not on the path); and 50 creates at once.
// Each reports p50 and p99 (ms).

func BenchmarkLifecycle(b *testing.B) { sandboxtest.BenchLifecycle(b, backendTB(b)) }

// BenchmarkLifecycleAgentInImage: the same with the agent in the image
// (no init container).
func BenchmarkLifecycleAgentInImage(b *testing.B) {
	backendTB(b)
	sandboxtest.BenchLifecycle(b, inImage(b))
}

// BenchmarkBarePod is the raw path: kubectl makes a pod of the image
// running sleep, waits for it to be ready, and execs /bin/true in it; the
// pod's deletion is not timed.
func BenchmarkBarePod(b *testing.B) {
	backendTB(b) // the cluster and its images
	k := testutil.Cluster(b)
	_, image := k.Images(b)
	var starts, totals []time.Duration
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("bare-%d-%d", time.Now().UnixNano()%1e6, i)
		t0 := time.Now()
		k.Kubectl(b, "run", name, "--image="+image, "--image-pull-policy=IfNotPresent", "--restart=Never", "--command", "--", "sleep", "3600")
		k.Kubectl(b, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=120s")
		t1 := time.Now()
		k.Kubectl(b, "exec", name, "--", "/bin/true")
		t2 := time.Now()
		starts, totals = append(starts, t1.Sub(t0)), append(totals, t2.Sub(t0))
		b.StopTimer()
		k.Kubectl(b, "delete", "pod", name, "--grace-period=1")
		b.StartTimer()
	}
	testutil.ReportPercentiles(b, "ready", starts)
	testutil.ReportPercentiles(b, "create-to-result", totals)
}

func BenchmarkExecWarm(b *testing.B) { sandboxtest.BenchExecWarm(b, backendTB(b)) }

// BenchmarkConcurrentCreates: 50 sandboxes created at once, each to its
// first exec's result.
func BenchmarkConcurrentCreates(b *testing.B) {
	sandboxtest.BenchConcurrentCreates(b, backendTB(b), 50)
}
