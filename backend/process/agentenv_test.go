//go:build linux

package process_test

import (
	"os"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// TestAgentOnOneP: the sandbox's init, which becomes its agent, runs with
// GOMAXPROCS=1 (read from the host), and that setting never reaches the
// commands, whose environment is the sandbox's own.
func TestAgentOnOneP(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := ownStateDir(t)
	b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: dir})
	t.Cleanup(func() { b.Close() })
	sb := createOn(t, b, sandbox.Spec{Env: map[string]string{"SANDBOX_VAR": "x"}})
	out, _, res := sh(t, sb, "env")
	if res.ExitCode != 0 || !strings.Contains(out, "SANDBOX_VAR=x") {
		t.Fatalf("env: %+v\n%s", res, out)
	}
	if strings.Contains(out, "GOMAXPROCS") {
		t.Errorf("a command sees the agent's GOMAXPROCS:\n%s", out)
	}
	inits, err := sandboxInits(dir)
	if err != nil || len(inits) != 1 {
		t.Fatalf("inits %v: %v", inits, err)
	}
	environ, err := os.ReadFile("/proc/" + inits[0].pid + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00"); len(got) != 1 || got[0] != "GOMAXPROCS=1" {
		t.Errorf("the agent's environment: %q, want only GOMAXPROCS=1", got)
	}
}
