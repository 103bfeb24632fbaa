package oci_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/conformance"
	"github.com/cordon-sandbox/cordon/backend/adversarial"
	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// runtimes are the OCI runtimes the container tier is tested with; each
// must be present under CI.
var runtimes = []string{"crun", "runc"}

func backend(t *testing.T, runtime string) *oci.Backend {
	t.Helper()
	testutil.RequiresRoot(t)
	testutil.Requires(t, runtime)
	dir := filepath.Join(os.TempDir(), "cordon-oci-test")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	b := oci.New(oci.Config{Runtime: runtime, AgentPath: testutil.BuildAgent(t), StateDir: dir})
	if err := b.Probe(t.Context()); err != nil {
		testutil.Missing(t, "container tier with %s unavailable: %v", runtime, err)
	}
	return b
}

func forEachRuntime(t *testing.T, f func(t *testing.T, b *oci.Backend)) {
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) { f(t, backend(t, rt)) })
	}
}

func TestConformance(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) {
		conformance.Run(t, conformance.FromBackend(b, sandbox.Spec{}))
	})
}

func create(t *testing.T, b *oci.Backend, spec sandbox.Spec) *sandbox.Sandbox {
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

func sh(t *testing.T, sb *sandbox.Sandbox, script string) (string, *sandbox.Result) {
	t.Helper()
	var out bytes.Buffer
	res, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", script}, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), res
}

func creator(b *oci.Backend) adversarial.Create {
	return func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox { return create(t, b, spec) }
}

func TestAdversarial(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) { adversarial.Run(t, creator(b)) })
}

func TestLimits(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) { adversarial.Limits(t, creator(b)) })
}

func TestEscapeesDie(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, b *oci.Backend) { adversarial.Escapees(t, creator(b)) })
}
