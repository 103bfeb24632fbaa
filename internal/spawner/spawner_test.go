//go:build linux

package spawner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// run starts cmd through s and returns its process and what it printed
// (read to the end, so only for commands that exit).
func run(t *testing.T, s *Spawner, cmd *exec.Cmd) (*Process, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := s.Start(cmd, w)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	return p, string(out)
}

func exited(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatalf("pid %d has not exited", p.Pid())
	}
}

// serves checks that s starts a process that runs to its end: an echo of
// what.
func serves(t *testing.T, s *Spawner, what string) {
	t.Helper()
	p, out := run(t, s, exec.Command("/bin/echo", what))
	exited(t, p)
	if out != what+"\n" {
		t.Errorf("%s: echo printed %q", what, out)
	}
}

func TestSpawner(t *testing.T) {
	agent := testutil.BuildAgent(t)
	s, err := Shared(agent)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := Shared(agent); again != s {
		t.Error("a second Shared started a second helper")
	}

	t.Run("ExitAndOutput", func(t *testing.T) {
		extra, w, _ := os.Pipe()
		defer extra.Close()
		cmd := exec.Command("/bin/sh", "-c", "echo $GREETING; pwd; echo extra >&3; exit 3")
		cmd.Env, cmd.Dir, cmd.ExtraFiles = []string{"GREETING=hi"}, "/tmp", []*os.File{w}
		p, out := run(t, s, cmd)
		w.Close()
		exited(t, p)
		if out != "hi\n/tmp\n" || p.ExitCode() != 3 {
			t.Errorf("got %q, exit %d; want \"hi\\n/tmp\\n\", exit 3", out, p.ExitCode())
		}
		if got, _ := io.ReadAll(extra); string(got) != "extra\n" {
			t.Errorf("descriptor 3 got %q", got)
		}
	})

	t.Run("Signal", func(t *testing.T) {
		p, _ := run(t, s, exec.Command("/bin/sh", "-c", "exec sleep 100 >/dev/null 2>&1"))
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		exited(t, p)
		if p.ExitCode() != -1 {
			t.Errorf("exit code %d after SIGKILL, want -1", p.ExitCode())
		}
		if err := p.Kill(); err != os.ErrProcessDone {
			t.Errorf("signal after exit: %v, want os.ErrProcessDone", err)
		}
	})

	t.Run("UserNamespace", func(t *testing.T) {
		testutil.RequiresRoot(t)
		cmd := exec.Command("/bin/sh", "-c", "cat /proc/self/uid_map; id -u; grep Groups /proc/self/status")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 200000, Size: 65536}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 200000, Size: 65536}},
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{},
		}
		p, out := run(t, s, cmd)
		exited(t, p)
		if f := strings.Fields(out); len(f) < 5 || f[1] != "200000" || f[3] != "0" || f[4] != "Groups:" || len(f) > 5 {
			t.Errorf("got %q; want uid 0 mapped to 200000 and no groups", out)
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		cmd := exec.Command("/bin/true")
		cmd.Args = append(cmd.Args, strings.Repeat("x", 300<<10))
		if _, err := s.Start(cmd, os.Stderr); err == nil {
			t.Error("an oversized request was accepted")
		}
		if _, err := s.Start(exec.Command("/nonexistent/program"), os.Stderr); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("missing program: %v", err)
		}
		withFD := exec.Command("/bin/true")
		fd := 0
		withFD.SysProcAttr = &syscall.SysProcAttr{PidFD: &fd}
		if _, err := s.Start(withFD, os.Stderr); err == nil || !strings.Contains(err.Error(), "pidfd") {
			t.Errorf("a pidfd descriptor in the request: %v", err)
		}
		// The helper still serves.
		serves(t, s, "after refusals")
	})
}

// TestSpawnerEnds: when the helper ends, a process it started with a
// parent-death signal dies with it, one started without lives on, and both
// are still watched (through their pidfds) and can be signalled; the next
// Shared starts a new helper.
func TestSpawnerEnds(t *testing.T) {
	agent := testutil.BuildAgent(t)
	s, err := start(agent)
	if err != nil {
		t.Fatal(err)
	}
	bound := exec.Command("/bin/sh", "-c", "exec sleep 100 >/dev/null 2>&1")
	bound.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pb, _ := run(t, s, bound)
	pf, _ := run(t, s, exec.Command("/bin/sh", "-c", "exec sleep 100 >/dev/null 2>&1"))
	defer pf.Kill()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the helper's end went unnoticed")
	}
	exited(t, pb)
	select {
	case <-pf.Exited():
		t.Fatal("a process without a parent-death signal died with the helper")
	case <-time.After(100 * time.Millisecond):
	}
	if err := pf.Kill(); err != nil {
		t.Fatal(err)
	}
	exited(t, pf)
	if _, err := s.Start(exec.Command("/bin/true"), os.Stderr); err == nil {
		t.Error("an ended helper accepted a request")
	}
}

// TestDiesWithHost: the helper carries a parent-death signal, so when its
// host dies it ends, and so does every process it started with one. The
// host here is this test binary run again (see hostMain).
func TestDiesWithHost(t *testing.T) {
	agent := testutil.BuildAgent(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDiesWithHost$")
	cmd.Env = append(os.Environ(), "SPAWNER_TEST_HOST="+agent)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var helper, child int
	if _, err := fmt.Fscan(out, &helper, &child); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range []int{helper, child} {
		for syscall.Kill(pid, 0) == nil && !zombie(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d outlived the host", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func zombie(pid int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func TestMain(m *testing.M) {
	if agent := os.Getenv("SPAWNER_TEST_HOST"); agent != "" {
		os.Exit(hostMain(agent))
	}
	os.Exit(m.Run())
}

// hostMain starts a helper and a child through it, prints both pids and
// waits to be killed.
func hostMain(agent string) int {
	s, err := Shared(agent)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command("/bin/sleep", "100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p, err := s.Start(cmd, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(s.cmd.Process.Pid, p.Pid())
	select {}
}

// TestSpawnerThreads: the helper reaps its processes in one loop, so many
// live processes do not hold a thread each; every exit is still reported.
func TestSpawnerThreads(t *testing.T) {
	s, err := Shared(testutil.BuildAgent(t))
	if err != nil {
		t.Fatal(err)
	}
	var procs []*Process
	for range 64 {
		p, _ := run(t, s, exec.Command("/bin/sh", "-c", "exec sleep 100 >/dev/null 2>&1"))
		procs = append(procs, p)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	for _, l := range strings.Split(string(status), "\n") {
		if n, ok := strings.CutPrefix(l, "Threads:"); ok {
			if threads, _ := strconv.Atoi(strings.TrimSpace(n)); threads > 32 {
				t.Errorf("the helper has %d threads for 64 processes", threads)
			}
		}
	}
	for _, p := range procs {
		_ = p.Kill()
	}
	for _, p := range procs {
		exited(t, p)
	}
}

// TestSpawnerHangs: a helper that does not answer is ended after
// answerTimeout, the start fails, and the next Shared starts a new one.
func TestSpawnerHangs(t *testing.T) {
	agent := testutil.BuildAgent(t)
	s, err := Shared(agent)
	if err != nil {
		t.Fatal(err)
	}
	old := answerTimeout
	answerTimeout = 300 * time.Millisecond
	defer func() { answerTimeout = old }()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(exec.Command("/bin/true"), os.Stderr); !errors.Is(err, ErrGone) {
		t.Fatalf("a stopped helper: %v, want ErrGone", err)
	}
	select {
	case <-s.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the stopped helper was not ended")
	}
	s2, err := Shared(agent)
	if err != nil || s2 == s {
		t.Fatalf("after a hung helper: %v (same: %v)", err, s2 == s)
	}
	serves(t, s2, "the new helper")
}

// TestFirstExit: a helper's very first process may exit at once, before
// the helper has done anything else; its exit is still reported. (The
// helper used to start listening for SIGCHLD in a goroutine of its own,
// which might run only after that exit, and the exit was then never seen.)
func TestFirstExit(t *testing.T) {
	agent := testutil.BuildAgent(t)
	for range 30 {
		s, err := start(agent)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Start(exec.Command("/bin/true"), os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		exited(t, p)
		_ = s.cmd.Process.Kill()
		<-s.gone
	}
}

// TestRunning: Running answers nil while it starts a helper in the
// background, then that helper, which Shared also returns; one that ends
// is replaced.
func TestRunning(t *testing.T) {
	// A copy of the agent of its own: the helpers are per agent path, and
	// other tests have started one for the built agent.
	built, err := os.ReadFile(testutil.BuildAgent(t))
	if err != nil {
		t.Fatal(err)
	}
	agent := t.TempDir() + "/cordon-agent"
	if err := os.WriteFile(agent, built, 0o755); err != nil {
		t.Fatal(err)
	}
	if s := Running(agent); s != nil {
		t.Fatal("Running returned a helper before any was started")
	}
	warm := func() *Spawner {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if s := Running(agent); s != nil {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatal("no helper running 10 s after Running started one")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	s := warm()
	serves(t, s, "warmed")
	if again, err := Shared(agent); err != nil || again != s {
		t.Errorf("Shared after Running: %p %v; want the same helper %p", again, err, s)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.gone
	s2 := warm()
	if s2 == s {
		t.Fatal("Running returned the helper that ended")
	}
	serves(t, s2, "replaced")
}
