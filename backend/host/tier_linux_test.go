package host_test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestBoundTasks: a tier's parent pids cgroup gets the bound where it has
// none, keeps one already written (an operator's), and the bound holds
// against processes of the cgroups below it together; TierTasks leaves the
// host a quarter of its task ids, and each of two tiers half the rest.
func TestBoundTasks(t *testing.T) {
	testutil.RequiresRoot(t)
	if host.PidsV1() == "" {
		testutil.Missing(t, "a cgroup v1 pids hierarchy")
	}
	pidMax := readInt(t, "/proc/sys/kernel/pid_max")
	n := min(pidMax, readInt(t, "/proc/sys/kernel/threads-max"))
	if got, want := host.TierTasks(), max((n-max(n/4, 1024))/2, 1024); got != want || 2*got > n-1024 {
		t.Errorf("TierTasks %d, want %d of %d", got, want, n)
	}
	dir := testCgroup(t, "pids", "a", "b")
	if err := host.BoundTasks(dir, 20); err != nil {
		t.Fatal(err)
	}
	if err := host.BoundTasks(dir, 500); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "pids.max")); strings.TrimSpace(string(got)) != "20" {
		t.Fatalf("pids.max %q after a second bound, want the first's 20", got)
	}
	// Two cgroups below it, as two sandboxes, each without a bound of
	// its own: their forks together stop at the parent's.
	forked := map[string]int{}
	for _, child := range []string{"a", "b"} {
		cmd, in, out := pythonIn(t, filepath.Join(dir, child), `n = 0
try:
    for _ in range(100):
        if os.fork() == 0:
            signal.pause()
            os._exit(0)
        n += 1
except OSError:
    pass
print(n, flush=True)
sys.stdin.readline()`)
		t.Cleanup(func() { in.Close(); _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		k, _ := strconv.Atoi(strings.TrimSpace(line))
		forked[child] = k
	}
	// The first takes the whole bound (its python and 19 children); the
	// second, moved in after, forks nothing.
	if forked["a"] != 19 || forked["b"] != 0 {
		t.Fatalf("forked %v under a bound of 20 for both, want a 19 and b none", forked)
	}
}

// testCgroup makes a cgroup of the test's own at the root of controller's
// v1 hierarchy, with the children named, and removes them all at t's end
// (a killed process's children leave their cgroup a moment after it).
func testCgroup(t *testing.T, controller string, children ...string) string {
	var b [6]byte
	rand.Read(b[:])
	dir := filepath.Join("/sys/fs/cgroup", controller, "cordon-test-"+hex.EncodeToString(b[:]))
	var dirs []string
	for _, c := range children {
		dirs = append(dirs, filepath.Join(dir, c))
	}
	dirs = append(dirs, dir)
	t.Cleanup(func() {
		for _, d := range dirs {
			deadline := time.Now().Add(10 * time.Second)
			for err := os.Remove(d); err != nil && !os.IsNotExist(err) && time.Now().Before(deadline); err = os.Remove(d) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs[:len(children)] {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// pythonIn starts python3 running script (os, signal and sys imported),
// in its own process group, moved into cgroup once it runs (pyenv's
// launcher forks before it). The caller waits for it.
func pythonIn(t *testing.T, cgroup, script string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	cmd := exec.Command("python3", "-c", "import os, signal, sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"+script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(out)
	if line, err := rd.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("python: %q %v", line, err)
	}
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, "go\n")
	return cmd, in, rd
}

func readInt(t *testing.T, path string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(readFile(t, path)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBoundMemory: a tier's parent memory cgroup gets the bound where it
// has none and keeps one already written; and a sandbox below it without a
// limit of its own, holding kernel memory no process's size shows (pipes'
// buffers), is OOM-killed at the parent's bound, inside it, rather than the
// host running out. TierMemory keeps the host a quarter of its memory.
func TestBoundMemory(t *testing.T) {
	testutil.RequiresRoot(t)
	if host.TierParent("memory", "x") != filepath.Join("/sys/fs/cgroup/memory", "x") {
		testutil.Missing(t, "a cgroup v1 memory hierarchy")
	}
	var total int64
	for _, line := range strings.Split(readFile(t, "/proc/meminfo"), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			total = kb << 10
		}
	}
	if got := host.TierMemory(); got != (total-max(total/4, 1<<30))&^(1<<20-1) {
		t.Errorf("TierMemory %d of %d", got, total)
	}
	dir := testCgroup(t, "memory", "a")
	if err := host.BoundMemory(dir, 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := host.BoundMemory(dir, 1<<30); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "memory.limit_in_bytes"))); got != strconv.Itoa(64<<20) {
		t.Fatalf("memory.limit_in_bytes %s after a second bound, want the first's", got)
	}
	cmd, _, out := pythonIn(t, filepath.Join(dir, "a"), `pipes = []
while len(pipes) < 200000:
    r, w = os.pipe()
    os.write(w, b"x" * 4096)
    pipes.append((r, w))
print("not stopped", len(pipes), flush=True)`)
	rest, _ := io.ReadAll(out)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || len(rest) > 0 {
		t.Fatalf("the pipes' holder: %v %q, want it OOM-killed at the parent's 64 MiB", err, rest)
	}
	if used, _ := strconv.ParseInt(strings.TrimSpace(readFile(t, filepath.Join(dir, "memory.max_usage_in_bytes"))), 10, 64); used > 64<<20 {
		t.Errorf("the parent held %d bytes, past its bound", used)
	}
}

func readFile(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
