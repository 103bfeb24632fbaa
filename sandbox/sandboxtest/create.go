package sandboxtest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// Create creates a sandbox of spec on b, destroyed (and the destroy
// checked) when the test ends; the agent's log is shown if it failed.
func Create(t testing.TB, b sandbox.Backend, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	return CreateWith(t, sandbox.NewProvider([]sandbox.Backend{b}), spec)
}

// CreateWith is Create through provider p.
func CreateWith(t testing.TB, p *sandbox.Provider, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
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

// Sh runs script with sh -c in sb (a minute at most) and returns its
// output, standard error included, and result; an exec that fails fails t.
func Sh(t *testing.T, sb *sandbox.Sandbox, script string) (string, *sandbox.Result) {
	t.Helper()
	var out bytes.Buffer
	res, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", script}, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), res
}

// BenchConcurrentCreates creates n sandboxes of be at once, each to its
// first exec's result: the wall time of the whole, and each create's.
func BenchConcurrentCreates(b *testing.B, be sandbox.Backend, n int) {
	p := sandbox.NewProvider([]sandbox.Backend{be})
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

// BenchExecWarm measures exec of `true` into one warm sandbox of be.
func BenchExecWarm(b *testing.B, be sandbox.Backend) {
	p := sandbox.NewProvider([]sandbox.Backend{be})
	sb, err := p.Create(b.Context(), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	BenchExecIn(b, sb)
}

// BenchExecIn measures exec of `true` into sb.
func BenchExecIn(b *testing.B, sb *sandbox.Sandbox) {
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

// PauseResume checks a sandbox that can pause: resuming one that runs is
// no error; paused, its agent does not answer; resumed, a counter inside
// moves again; and a paused sandbox is destroyed all the same (its
// teardown thaws it first).
func PauseResume(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	go sb.Exec(context.Background(), "sh", sandbox.ExecOptions{Args: []string{"-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.01; done"}, Timeout: 5 * time.Minute})
	read := func() string {
		b, err := sb.ReadFile(t.Context(), "/tmp/n")
		if err != nil {
			return ""
		}
		return string(b)
	}
	for deadline := time.Now().Add(10 * time.Second); read() == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the counter never started")
		}
	}
	if err := sb.Resume(t.Context()); err != nil {
		t.Fatalf("resuming a running sandbox: %v", err)
	}
	if err := sb.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	if _, err := sb.Activity(ctx); err == nil {
		t.Fatal("a paused sandbox's agent answered")
	}
	cancel()
	if err := sb.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := read()
	for deadline := time.Now().Add(10 * time.Second); read() == a; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the counter did not move after resume: %q", a)
		}
	}
	if err := sb.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
}
