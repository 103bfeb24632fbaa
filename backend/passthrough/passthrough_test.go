package passthrough_test

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/backend/passthrough"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
)

func backend(t *testing.T) *passthrough.Backend {
	return passthrough.New(passthrough.Config{AgentPath: testutil.BuildAgent(t)})
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.FromBackend(backend(t), sandbox.Spec{}))
}

func provider(t *testing.T) *sandbox.Provider {
	return sandbox.NewProvider([]sandbox.Backend{backend(t)})
}

func TestRefusesLimits(t *testing.T) {
	p := provider(t)
	for _, l := range []sandbox.Limits{{MemoryBytes: 1 << 30}, {Pids: 10}, {CPUs: 1}} {
		_, err := p.Create(t.Context(), sandbox.Spec{Limits: l})
		var ue *sandbox.UnsupportedError
		if !errors.Is(err, sandbox.ErrUnsupported) || !errors.As(err, &ue) {
			t.Errorf("limits %+v: err %v, want an UnsupportedError", l, err)
		}
	}
}

func TestLifecycle(t *testing.T) {
	p := provider(t)
	sb, err := p.Create(t.Context(), sandbox.Spec{Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", "echo $GREETING; echo $$ > pid; setsid sleep 300 >/dev/null 2>&1 & echo $! > bg"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatalf("res %+v err %v out %q", res, err, out.String())
	}
	// The setsid'd sleep left the command's group, so it outlives the
	// command; Destroy must still end it.
	bg, err := sb.ReadFile(t.Context(), "bg")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(t.Context(), "w.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	ep := sb.Client().Endpoint()
	if strings.Contains(strings.Join(os.Environ(), "\n"), ep.Token) {
		t.Fatal("the agent token leaked into cordon's own environment")
	}
	agentPid := findAgent(t, ep.Address)
	cmdline, _ := os.ReadFile("/proc/" + agentPid + "/cmdline")
	if bytes.Contains(cmdline, []byte(ep.Token)) {
		t.Fatal("the agent token is in the agent's argv")
	}

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = sb.Destroy(t.Context()) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("destroy: %v", err)
		}
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
	if _, err := sb.Exec(t.Context(), "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Fatalf("exec after destroy: %v", err)
	}
	for _, pid := range []string{agentPid, strings.TrimSpace(string(bg))} {
		if !gone(pid) {
			t.Errorf("process %s outlived Destroy", pid)
		}
	}
	dir := ep.Address[:strings.LastIndex(ep.Address, "/")]
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox directory %s remains: %v", dir, err)
	}
}

func TestHostWorkspaceIsKept(t *testing.T) {
	ws := t.TempDir()
	sb, err := provider(t).Create(t.Context(), sandbox.Spec{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(t.Context(), "kept.txt", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ws + "/kept.txt"); err != nil || string(b) != "kept" {
		t.Fatalf("workspace file after destroy: %q %v", b, err)
	}
}

func TestAgentFailureIsReported(t *testing.T) {
	p := sandbox.NewProvider([]sandbox.Backend{passthrough.New(passthrough.Config{AgentPath: "/bin/false"})}, sandbox.WithReadyTimeout(5*time.Second))
	_, err := p.Create(t.Context(), sandbox.Spec{})
	if !errors.Is(err, sandbox.ErrAgent) {
		t.Fatalf("err %v, want ErrAgent", err)
	}
}

func findAgent(t *testing.T, socket string) string {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, []byte("CORDON_AGENT_SOCKET="+socket)) {
			return e.Name()
		}
	}
	t.Fatal("agent process not found")
	return ""
}

func gone(pid string) bool {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
