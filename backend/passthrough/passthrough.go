// Package passthrough is the tier without isolation: cordon-agent runs as a
// host child process, on a unix socket in a private directory. It exists for
// tests and explicitly trusted work, and it refuses every limit, because it
// can enforce none.
package passthrough

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/internal/agentbin"
	"github.com/cordon-sandbox/cordon/internal/agentproc"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// Name is the tier name.
const Name = "passthrough"

// Config configures the backend.
type Config struct {
	// AgentPath is the cordon-agent binary; empty means agentbin.Find.
	AgentPath string
	// StateDir holds each sandbox's private directory; empty means the
	// system temporary directory.
	StateDir string
}

// Backend is the passthrough tier.
type Backend struct{ cfg Config }

var _ sandbox.Backend = (*Backend)(nil)

// The abilities the passthrough tier has (sandbox's optional interfaces).
var (
	_ sandbox.Instance  = (*instance)(nil)
	_ sandbox.Signaller = (*instance)(nil)
	_ sandbox.ExitCoder = (*instance)(nil)
)

// New returns the passthrough backend.
func New(cfg Config) *Backend { return &Backend{cfg: cfg} }

func (b *Backend) Name() string { return Name }

func (b *Backend) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Isolated: false, HostWorkspace: true}
}

func (b *Backend) Probe(ctx context.Context) error {
	if _, err := agentbin.Find(b.cfg.AgentPath); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	return nil
}

// hostEnv is what a passthrough command inherits from the host: enough to
// find programs and print text, and none of the host's credentials.
var hostEnv = []string{"PATH", "LANG", "LC_ALL", "TERM", "TZ"}

func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	agent, err := agentbin.Find(b.cfg.AgentPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	dir, err := os.MkdirTemp(b.cfg.StateDir, "cordon-pt-")
	if err != nil {
		return nil, err
	}
	workspace := l.Spec.Workspace
	ownWorkspace := workspace == ""
	if ownWorkspace {
		workspace = filepath.Join(dir, "workspace")
	} else if workspace, err = filepath.Abs(workspace); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	home := filepath.Join(dir, "home")
	for _, d := range []string{workspace, home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	socket := filepath.Join(dir, "agent.sock")

	env := []string{"HOME=" + home}
	for _, k := range hostEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(l.Spec.Env))
	for k := range l.Spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+l.Spec.Env[k])
	}
	for k, v := range l.AgentEnv {
		env = append(env, "CORDON_AGENT_"+k+"="+v)
	}
	env = append(env,
		"CORDON_AGENT_TOKEN="+l.Token,
		"CORDON_AGENT_SOCKET="+socket,
		"CORDON_AGENT_WORKSPACE="+workspace,
		"CORDON_AGENT_WRITE_ROOTS="+home,
		"CORDON_AGENT_READ_ROOTS="+home,
	)

	cmd := exec.Command(agent)
	cmd.Env = env
	cmd.Dir = workspace
	// The agent gets SIGTERM if cordon dies, and then stops every command
	// it started before it exits: nothing outlives its creator.
	cmd.SysProcAttr = procAttr()
	proc, err := agentproc.Start(cmd, client.Endpoint{Network: "unix", Address: socket, Token: l.Token})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: start cordon-agent: %v", sandbox.ErrAgent, err)
	}
	inst := &instance{Proc: proc, dir: dir}
	return inst, nil
}

type instance struct {
	*agentproc.Proc
	dir  string
	mu   sync.Mutex
	gone bool
}

// Destroy asks the agent to stop (it stops its commands first), escalates to
// SIGKILL of its whole group if it does not exit in time, confirms the exit
// and removes the private directory.
func (i *instance) Destroy(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone {
		return nil
	}
	_ = i.Signal(syscall.SIGTERM)
	select {
	case <-i.Exited():
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-i.Pid(), syscall.SIGKILL)
		select {
		case <-i.Exited():
		case <-time.After(5 * time.Second):
			return fmt.Errorf("%w: cordon-agent (pid %d) did not exit after SIGKILL", sandbox.ErrTeardown, i.Pid())
		}
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", sandbox.ErrTeardown, ctx.Err())
	}
	if err := os.RemoveAll(i.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %v", sandbox.ErrTeardown, i.dir, err)
	}
	i.gone = true
	return nil
}
