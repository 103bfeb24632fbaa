package microvm_test

import (
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/backend/microvm"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
)

func backend(t testing.TB) *microvm.Backend {
	t.Helper()
	testutil.RequiresRoot(t)
	b := microvm.New(microvm.Config{AgentPath: testutil.BuildAgent(t), StateDir: t.TempDir()})
	if err := b.Probe(t.Context()); err != nil {
		testutil.Missing(t, "microvm tier unavailable: %v", err)
	}
	return b
}

func TestExec(t *testing.T) {
	b := backend(t)
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	out, res := sandboxtest.Sh(t, sb, "echo hello from $(uname -r); id -u; cat /proc/1/comm; ls /sys/fs/cgroup | head -3")
	t.Logf("accel %s: %q %+v", b.Accel(), out, res)
	if !strings.HasPrefix(out, "hello from ") {
		t.Fatalf("%q", out)
	}
}

// TestRestoredGuestsDiffer: two sandboxes restored from one saved guest
// have their own boot ids, tokens, random streams and files.
func TestRestoredGuestsDiffer(t *testing.T) {
	b := backend(t)
	var sbs []*sandbox.Sandbox
	var outs []string
	for range 2 {
		sb := sandboxtest.Create(t, b, sandbox.Spec{})
		if d := sb.Diagnostics(); !strings.Contains(d, "restored from a saved guest") {
			t.Fatalf("not restored:\n%s", d)
		}
		out, _ := sandboxtest.Sh(t, sb, "head -c 16 /dev/urandom | od -An -tx1; cat /proc/sys/kernel/random/boot_id; ls /workspace; echo mine > /workspace/f")
		sbs, outs = append(sbs, sb), append(outs, out)
	}
	if outs[0] == outs[1] || sbs[0].BootID() == sbs[1].BootID() || sbs[0].BootID() == "" || sbs[0].Client().Endpoint().Token == sbs[1].Client().Endpoint().Token {
		t.Fatalf("two restored guests share state (boot ids %q %q):\n%s\n%s", sbs[0].BootID(), sbs[1].BootID(), outs[0], outs[1])
	}
	// Each agent demands its own token.
	if _, err := client.New(client.Endpoint{Network: "unix", Address: sbs[0].Client().Endpoint().Address, Token: sbs[1].Client().Endpoint().Token}).Exec(t.Context(), "true", client.ExecOptions{}); err == nil {
		t.Fatal("a guest's agent admitted another's token")
	}
	for i, out := range outs {
		if strings.Contains(out, "f\n") {
			t.Fatalf("guest %d found another's file: %q", i, out)
		}
	}
}
