package sandboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// Create creates a sandbox of spec on b, destroyed (and the destroy
// checked) when the test ends; the agent's log is shown if it failed.
func Create(t testing.TB, b sandbox.Backend, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	p := sandbox.NewProvider([]sandbox.Backend{b})
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent said:\n%s", sb.Diagnostics())
		}
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

// BenchLifecycle measures create → first exec of `true` → destroy on be,
// reporting each step's and the whole's p50 and p99 (ms).
func BenchLifecycle(b *testing.B, be sandbox.Backend) {
	p := sandbox.NewProvider([]sandbox.Backend{be})
	var create, first, destroy, total []time.Duration
	for b.Loop() {
		t0 := time.Now()
		sb, err := p.Create(b.Context(), sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := sb.Exec(b.Context(), "true", sandbox.ExecOptions{}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := sb.Destroy(b.Context()); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		create, first, destroy, total = append(create, t1.Sub(t0)), append(first, t2.Sub(t1)), append(destroy, t3.Sub(t2)), append(total, t2.Sub(t0))
	}
	testutil.ReportPercentiles(b, "create", create)
	testutil.ReportPercentiles(b, "first-exec", first)
	testutil.ReportPercentiles(b, "create-to-result", total)
	testutil.ReportPercentiles(b, "destroy", destroy)
}

// BenchExecWarm measures exec of `true` into one warm sandbox of be.
func BenchExecWarm(b *testing.B, be sandbox.Backend) {
	p := sandbox.NewProvider([]sandbox.Backend{be})
	sb, err := p.Create(b.Context(), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := sb.Exec(b.Context(), "true", sandbox.ExecOptions{}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	testutil.ReportPercentiles(b, "exec", ds)
}
