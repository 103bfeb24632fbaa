package microvm

import (
	"context"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// TestRejoinAtOnce: a host that goes and a next one that rejoins at once,
// before the guest can have seen the first go (its old session may take
// the rejoin), still gets the same agent, with its boot and its files,
// each of several times over.
func TestRejoinAtOnce(t *testing.T) {
	testutil.RequiresRoot(t)
	cfg := Config{AgentPath: testutil.BuildAgent(t), StateDir: testutil.StateDir(t), ColdBoot: true, Detached: true}
	b := New(cfg)
	if err := b.Probe(t.Context()); err != nil {
		testutil.Missing(t, "microvm tier unavailable: %v", err)
	}
	const token = "rejoin-test-token-0123456789abcdef"
	in, err := b.Start(t.Context(), sandbox.Launch{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	vm := in.(*instance)
	t.Cleanup(func() { vm.Destroy(context.Background()) })
	c := client.New(vm.Endpoint())
	h, err := c.Health(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(t.Context(), "sh", client.ExecOptions{Args: []string{"-c", "echo kept > /workspace/f"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		state, err := vm.State()
		if err != nil {
			t.Fatal(err)
		}
		// The host goes, as a daemon's process does: its side of the
		// ports closes, the VMM runs on.
		c.Close()
		vm.session.Close()
		vm.agentLn.Close()
		vm.port.Close()
		vm.control.Close()
		next, err := New(cfg).Adopt(t.Context(), state, token)
		if err != nil {
			t.Fatalf("rejoin %d: %v", i, err)
		}
		vm = next.(*instance)
		c = client.New(vm.Endpoint())
		h2, err := c.Health(t.Context())
		if err != nil || h2.BootID != h.BootID {
			t.Fatalf("rejoin %d: health %+v, %v (boot was %s)", i, h2, err, h.BootID)
		}
		var out strings.Builder
		if res, err := c.Exec(t.Context(), "cat", client.ExecOptions{Args: []string{"/workspace/f"}, Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "kept\n" {
			t.Fatalf("rejoin %d: %q %+v %v", i, out.String(), res, err)
		}
	}
}
