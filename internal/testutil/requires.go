// Package testutil holds the helpers every cordon test uses to say what it
// needs from the machine. Outside CI a missing prerequisite skips the test
// with the reason; under CI=true it fails it, so no tier silently goes
// untested.
package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips t outside CI and fails it under CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("prerequisite missing under CI=true: "+format, args...)
	}
	t.Skipf("skipping: "+format, args...)
}

// RequiresRoot needs uid 0.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root")
	}
}

// Requires needs each named program on PATH and returns their paths.
func Requires(t testing.TB, programs ...string) []string {
	t.Helper()
	var out []string
	for _, p := range programs {
		path, err := exec.LookPath(p)
		if err != nil {
			Missing(t, "needs %s on PATH (scripts/setup.sh installs it)", p)
		}
		out = append(out, path)
	}
	return out
}

// RepoRoot is the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// SharedDir is the project's shared/ directory, beside the repository
// (CORDON_SHARED_DIR overrides).
func SharedDir(t testing.TB) string {
	if d := os.Getenv("CORDON_SHARED_DIR"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(t), "..", "shared")
}

// BuildAgent builds cordon-agent once per test binary and returns its path.
func BuildAgent(t testing.TB) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cordon-agent-bin-")
		if err != nil {
			agentErr = err
			return
		}
		// Sandboxes run it as an unprivileged mapped user: it must be
		// reachable by everyone, as an installed binary is.
		if err := os.Chmod(dir, 0o755); err != nil {
			agentErr = err
			return
		}
		agentPath = filepath.Join(dir, "cordon-agent")
		cmd := exec.Command("go", "build", "-o", agentPath, "./cmd/cordon-agent")
		cmd.Dir = RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("building cordon-agent: %v\n%s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentPath
}

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)
