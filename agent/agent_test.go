//go:build linux

package agent_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
)

// proc is an agent process started by a test.
type proc struct {
	cmd    *exec.Cmd
	out    *logbuf.Buffer
	exited chan struct{}
	code   int
}

func startProc(t testing.TB, argv []string, env []string) *proc {
	t.Helper()
	p := &proc{out: logbuf.New(1 << 20), exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		// Whatever a test left behind in the agent's group goes too.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		if t.Failed() {
			t.Logf("agent output:\n%s", p.out.String())
		}
	})
	return p
}

func (p *proc) target(ep client.Endpoint, prefix string, reference bool) *conformance.Target {
	return &conformance.Target{
		Endpoint:  ep,
		EnvPrefix: prefix,
		Reference: reference,
		Signal: func(sig string) error {
			s := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "INT": syscall.SIGINT}[sig]
			return p.cmd.Process.Signal(s)
		},
		Exited:      p.exited,
		ExitCode:    func() int { return p.code },
		HostPIDGone: hostPIDGone,
	}
}

func waitReady(t testing.TB, p *proc, ep client.Endpoint) {
	t.Helper()
	c := client.New(ep)
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := c.Admit(t.Context()); err == nil {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("agent exited before it was ready:\n%s", p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready:\n%s", p.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func baseEnv(workspace string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + workspace, "LANG=C.UTF-8"}
}

// startCordonAgent runs cordon-agent on a unix socket.
func startCordonAgent(t *testing.T, s conformance.Settings) *conformance.Target {
	tg, _ := startCordon(t, s, false)
	return tg
}

// startCordon runs cordon-agent on a unix socket, or on a loopback port.
func startCordon(t testing.TB, s conformance.Settings, tcp bool) (*conformance.Target, *proc) {
	bin := testutil.BuildAgent(t)
	dir, err := os.MkdirTemp("", "cag-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	token := strings.NewReplacer("/", "-", " ", "-").Replace("tok-" + t.Name())
	ep := client.Endpoint{Network: "unix", Address: filepath.Join(dir, "a.sock"), Token: token}
	env := append(baseEnv(ws), "CORDON_AGENT_TOKEN="+ep.Token, "CORDON_AGENT_WORKSPACE="+ws, "CORDON_AGENT_IDLE_TIMEOUT_MS=0")
	if tcp {
		port := freePort(t)
		ep = client.Endpoint{Network: "tcp", Address: fmt.Sprintf("127.0.0.1:%d", port), Token: token}
		env = append(env, "CORDON_AGENT_BIND=127.0.0.1", fmt.Sprintf("CORDON_AGENT_PORT=%d", port))
	} else {
		env = append(env, "CORDON_AGENT_SOCKET="+ep.Address)
	}
	for k, v := range s {
		env = append(env, "CORDON_AGENT_"+k+"="+v)
	}
	p := startProc(t, []string{bin}, env)
	waitReady(t, p, ep)
	return p.target(ep, "CORDON_AGENT_", false), p
}

// startReference runs the reference worker under node, behind tini as a
// subreaper, on a loopback port.
func startReference(t *testing.T, s conformance.Settings) *conformance.Target {
	tg, _ := startRef(t, s)
	return tg
}

func startRef(t testing.TB, s conformance.Settings) (*conformance.Target, *proc) {
	paths := testutil.Requires(t, "node", "tini")
	script := testutil.ReferenceWorker(t)
	ws := t.TempDir()
	port := freePort(t)
	ep := client.Endpoint{Network: "tcp", Address: fmt.Sprintf("127.0.0.1:%d", port), Token: "ref-token"}
	env := append(baseEnv(ws), "NAMZU_SANDBOX_TOKEN="+ep.Token, "NAMZU_SANDBOX_BIND=127.0.0.1", fmt.Sprintf("NAMZU_SANDBOX_PORT=%d", port), "NAMZU_SANDBOX_WORKSPACE="+ws, "NAMZU_SANDBOX_IDLE_TIMEOUT_MS=0")
	for k, v := range s {
		if k == "STDIO_HEARTBEAT_MS" {
			continue // a cordon-only setting
		}
		env = append(env, "NAMZU_SANDBOX_"+k+"="+v)
	}
	p := startProc(t, []string{paths[1], "-s", "--", paths[0], script}, env)
	waitReady(t, p, ep)
	return p.target(ep, "NAMZU_SANDBOX_", true), p
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestConformanceCordonAgent(t *testing.T) {
	conformance.Run(t, startCordonAgent)
}

func TestConformanceReference(t *testing.T) {
	conformance.Run(t, startReference)
}

// hostPIDGone: the agent runs unnamespaced here, so its pids are ours.
func hostPIDGone(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(n) + "/stat")
	// A zombie is gone for every purpose but its parent's wait.
	return err != nil || strings.Contains(string(b), ") Z ")
}

// TestBrokenLog: an agent whose standard output and error lead to a pipe
// nobody reads any more (the daemon that started it restarted) serves on:
// its writes there fail, they do not kill it with SIGPIPE.
func TestBrokenLog(t *testing.T) {
	bin := testutil.BuildAgent(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	ep := client.Endpoint{Network: "unix", Address: filepath.Join(dir, "a.sock"), Token: "tok-broken-log"}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(baseEnv(ws), "CORDON_AGENT_TOKEN="+ep.Token, "CORDON_AGENT_WORKSPACE="+ws, "CORDON_AGENT_SOCKET="+ep.Address, "CORDON_AGENT_IDLE_TIMEOUT_MS=0")
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	c := client.New(ep)
	defer c.Close()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := c.Admit(t.Context()); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the agent died: %v", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never listened")
		}
	}
	// It has written its start-up line by now; a refused request is logged.
	_, _ = client.New(client.Endpoint{Network: "unix", Address: ep.Address, Token: "wrong"}).Health(t.Context())
	if res, err := c.Exec(t.Context(), "true", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	select {
	case <-exited:
		t.Fatalf("the agent died: %v", cmd.ProcessState)
	case <-time.After(100 * time.Millisecond):
	}
}
