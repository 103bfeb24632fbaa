package main_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ptyClient drives a cordon command on a real terminal, as a user would.
type ptyClient struct {
	t   *testing.T
	cmd *exec.Cmd
	tty *os.File
	mu  sync.Mutex
	out bytes.Buffer
	end chan error
	// drained is closed once everything the program wrote was read (the
	// terminal's reads end after its last holder exited).
	drained chan struct{}
}

func startOnPTY(t *testing.T, rows, cols uint16, args ...string) *ptyClient {
	t.Helper()
	cmd := exec.Command(buildCLI(t), args...)
	cmd.Env = append(cmd.Environ(), "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	p := &ptyClient{t: t, cmd: cmd, tty: tty, end: make(chan error, 1), drained: make(chan struct{})}
	go func() {
		defer close(p.drained)
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { p.end <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		tty.Close()
	})
	return p
}

func (p *ptyClient) screen() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// typeAndWait types input and waits for want to show.
func (p *ptyClient) typeAndWait(input, want string) {
	p.t.Helper()
	if _, err := io.WriteString(p.tty, input); err != nil {
		p.t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(p.screen(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.t.Fatalf("typed %q, never saw %q in:\n%s", input, want, p.screen())
		}
	}
}

// typeKeyByKey types a command a key at a time, each echoed before the
// next: a space or Enter alone reaches the sandbox as that key.
func (p *ptyClient) typeKeyByKey() {
	p.t.Helper()
	line := ""
	for _, key := range []string{"echo", " ", "k$((4", " ", "+", " ", "5))z"} {
		line += key
		p.typeAndWait(key, line)
	}
	p.typeAndWait("\r", "k9z")
}

// exitCode waits for cordon to exit and returns its status.
func (p *ptyClient) exitCode() int {
	p.t.Helper()
	select {
	case <-p.end:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("cordon did not exit:\n%s", p.screen())
	}
	// What it wrote last may still be in the terminal, unread.
	select {
	case <-p.drained:
	case <-time.After(10 * time.Second):
	}
	return p.cmd.ProcessState.ExitCode()
}

// TestShell: cordon shell on a real terminal: typed commands run, the
// terminal's size goes in and follows a resize (SIGWINCH), Ctrl-C reaches
// the foreground job and not cordon, and the program's status comes back.
// The same through cordon run -it, without a daemon.
func TestShell(t *testing.T) {
	id, host, _ := daemonSandbox(t)

	p := startOnPTY(t, 30, 100, "shell", host, id)
	p.typeAndWait("echo $((6*7))x\r", "42x")
	p.typeKeyByKey()
	p.typeAndWait("stty size\r", "30 100")
	if err := pty.Setsize(p.tty, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGWINCH)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p.typeAndWait("stty size\r", "size")
		if strings.Contains(p.screen(), "40 120") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resize never reached the sandbox:\n%s", p.screen())
		}
	}
	p.typeAndWait("sleep 30.4321; echo slept\r", "sleep 30.4321")
	// Once sleep is the foreground job (the pattern's brackets keep it
	// from matching the command line of the shell that looks).
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if out, _, _ := cordon(t, "exec", host, id, "--", "sh", "-c", "pgrep -f 'sleep 30[.]4321' >/dev/null && echo yes || echo no"); out == "yes\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the foreground job never started")
		}
	}
	p.typeAndWait("\x03echo after-$?\r", "after-130")
	p.typeAndWait("exit 3\r", "exit")
	if code := p.exitCode(); code != 3 {
		t.Fatalf("cordon shell exited %d, want the shell's 3:\n%s", code, p.screen())
	}

	// A terminal started detached outlives its call; cordon attach, on a
	// terminal, types into it.
	if out, errOut, code := cordon(t, "exec", host, "-dt", "--name", "term", id, "--", "sh"); code != 0 || out != "term\n" {
		t.Fatalf("exec -dt: %d %q %s", code, out, errOut)
	}
	a := startOnPTY(t, 24, 80, "attach", host, id, "term")
	a.typeAndWait("echo attached-$((1+1))\r", "attached-2")
	a.typeAndWait("exit 4\r", "exit")
	if code := a.exitCode(); code != 4 {
		t.Fatalf("cordon attach exited %d, want the session's 4:\n%s", code, a.screen())
	}

	// cordon run -it, on the process tier without a daemon.
	r := startOnPTY(t, 24, 80, "run", "-it", "--", "sh")
	r.typeAndWait("echo run-$((2+3))\r", "run-5")
	r.typeKeyByKey()
	r.typeAndWait("exit 7\r", "exit")
	if code := r.exitCode(); code != 7 {
		t.Fatalf("cordon run -it exited %d, want 7:\n%s", code, r.screen())
	}
}
