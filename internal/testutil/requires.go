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
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// ReferenceWorker is the reference worker's script (SharedDir's
// reference/worker-server.js), which the agent's wire is checked against:
// where it is not (a plain clone of this repository alone), the test is
// skipped with the way to name it (CORDON_SHARED_DIR), and fails under CI.
func ReferenceWorker(t testing.TB) string {
	t.Helper()
	script := filepath.Join(SharedDir(t), "reference", "worker-server.js")
	if _, err := os.Stat(script); err != nil {
		Missing(t, "the reference worker is not at %s (set CORDON_SHARED_DIR to the directory holding reference/worker-server.js): %v", script, err)
	}
	return script
}

// BuildAgent builds cordon-agent once per test binary, as the project's
// build does (without cgo), and returns its path.
func BuildAgent(t testing.TB) string {
	if p := os.Getenv(EnvGuestAgent); p != "" {
		return p // a test binary run in a guest, with no Go toolchain
	}
	return agentBuilds[0].get(t)
}

// EnvGuestAgent names, for a test binary run inside a microVM's guest
// (RunInGuest), the cordon-agent it was given there.
const EnvGuestAgent = "CORDON_TEST_GUEST_AGENT"

// BuildAgentCgo builds cordon-agent with cgo, as `go install` does where a C
// compiler is present, once per test binary, and returns its path. Such an
// agent cannot confine all of its threads, so the process tier's init
// executes it instead of becoming it.
func BuildAgentCgo(t testing.TB) string {
	t.Helper()
	Requires(t, "gcc")
	return agentBuilds[1].get(t)
}

type agentBuild struct {
	cgo  string
	once sync.Once
	path string
	err  error
}

var agentBuilds = [2]*agentBuild{{cgo: "0"}, {cgo: "1"}}

func (a *agentBuild) get(t testing.TB) string {
	t.Helper()
	a.once.Do(func() {
		sweepAgentBuilds()
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", agentBuildPrefix, os.Getpid()))
		if err != nil {
			a.err = err
			return
		}
		// Sandboxes run it as an unprivileged mapped user: it must be
		// reachable by everyone, as an installed binary is.
		if err := os.Chmod(dir, 0o755); err != nil {
			a.err = err
			return
		}
		a.path = filepath.Join(dir, "cordon-agent")
		if err := goBuild(RepoRoot(t), a.path, "./cmd/cordon-agent", a.cgo); err != nil {
			a.err = fmt.Errorf("building cordon-agent (CGO_ENABLED=%s): %v", a.cgo, err)
		}
	})
	if a.err != nil {
		t.Fatal(a.err)
	}
	return a.path
}

// goBuild builds pkg (relative to root) to bin, with CGO_ENABLED=cgo and
// flags for go build, and
// installs it as an installer does: written whole, not left as the linker
// made it. The linker writes its output through a shared mapping, one
// 4 KiB page at a time, and the page cache keeps it so: every later start
// of that file then faults its pages in one by one, some 1.4 ms more for a
// `cordon run` here than the same bytes written whole (or read back from
// disk). scripts/setup.sh installs what it builds the same way.
func goBuild(root, bin, pkg, cgo string, flags ...string) error {
	built := bin + ".built"
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", built, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	defer os.Remove(built)
	b, err := os.ReadFile(built)
	if err != nil {
		return err
	}
	return os.WriteFile(bin, b, 0o755)
}

// agentBuildPrefix names the directories of BuildAgent's builds, followed by
// the pid of the test binary that made each.
const agentBuildPrefix = "cordon-agent-build-"

// sweepAgentBuilds removes the builds (10 MB each) of test binaries that
// have exited. A build serves its test binary to the end, and a test binary
// has no hook that runs after its last test, so each removes those its
// predecessors left.
func sweepAgentBuilds() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), agentBuildPrefix+"*-*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), agentBuildPrefix), "-")
		n, err := strconv.Atoi(pid)
		if err != nil || n <= 0 || n > 1<<22 { // PID_MAX_LIMIT
			continue
		}
		if syscall.Kill(n, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
}

// Deps lists what package pkg (a pattern relative to the repository's
// root, ./cmd/cordon) links, as `go list -deps -f format` prints it, one a
// line (format "" prints each import path), built with flags (-tags T).
func Deps(t testing.TB, pkg, format string, flags ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps"}, flags...)
	if format != "" {
		args = append(args, "-f", format)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// BuildCordon builds cordon (the light build) and cordon-full beside
// cordon-agent, as scripts/setup.sh lays them out (without cgo), once per
// test binary, and returns cordon's path.
func BuildCordon(t testing.TB) string {
	t.Helper()
	agent := BuildAgent(t)
	cordonBuild.Do(func() {
		// The light build, with the full one beside it, as setup.sh
		// installs them: every test of a verb the light one hands over
		// goes through the hand-over.
		dir := filepath.Dir(agent)
		if err := goBuild(RepoRoot(t), filepath.Join(dir, "cordon-full"), "./cmd/cordon", "0"); err != nil {
			cordonErr = fmt.Errorf("build cordon-full: %v", err)
		} else if err := goBuild(RepoRoot(t), filepath.Join(dir, "cordon"), "./cmd/cordon", "0", "-tags", "cordon_light"); err != nil {
			cordonErr = fmt.Errorf("build cordon: %v", err)
		}
		cordonPath = filepath.Join(dir, "cordon")
	})
	if cordonErr != nil {
		t.Fatal(cordonErr)
	}
	return cordonPath
}

var (
	cordonBuild sync.Once
	cordonPath  string
	cordonErr   error
)
