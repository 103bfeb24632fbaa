package host_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestThreadOf: a thread named by its id in a process's own PID namespace
// (as an agent's ready record names its command thread) is found among the
// host's ids, whichever thread it is; an id the process has none of is an
// error.
func TestThreadOf(t *testing.T) {
	testutil.RequiresRoot(t)
	// A process alone in a new PID namespace (its pid 1) with a second
	// thread, whose namespace id it prints.
	cmd := exec.Command("python3", "-c", `import os, threading, sys
ready = threading.Event()
def run():
    print(threading.get_native_id(), flush=True)
    ready.wait()
threading.Thread(target=run).start()
sys.stdin.read()
ready.set()`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	inner, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || inner == 1 {
		t.Fatalf("the second thread's id in its namespace: %q", line)
	}
	pid := cmd.Process.Pid
	if got, err := host.ThreadOf(pid, 1); err != nil || got != pid {
		t.Fatalf("thread 1: %d %v, want %d", got, err, pid)
	}
	got, err := host.ThreadOf(pid, inner)
	if err != nil || got == pid || got == inner {
		t.Fatalf("thread %d: %d %v", inner, got, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(got)); err != nil {
		t.Fatalf("host thread %d is not the process's: %v", got, err)
	}
	if got, err := host.ThreadOf(pid, 9999); err == nil {
		t.Fatalf("thread 9999: %d, want an error", got)
	}
}
