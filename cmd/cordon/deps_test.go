package main_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestHostDependencies: the host binary does not link the agent's server
// (package agent and what only it uses). The host shares the process
// tier's init code (sandboxinit), which names the agent only through
// startup; a constant taken from package agent once linked all of it.
func TestHostDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/cordon")
	cmd.Dir = testutil.RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	// A positive control: the list is the binary's.
	if !contains(deps, "github.com/cordon-sandbox/cordon/agent/sandboxinit") {
		t.Fatalf("cordon does not link sandboxinit: not its dependency list?\n%s", out)
	}
	for _, banned := range []string{"github.com/cordon-sandbox/cordon/agent", "github.com/cordon-sandbox/cordon/agent/internal/httpd"} {
		if contains(deps, banned) {
			t.Errorf("cordon links %s, the agent's server", banned)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
