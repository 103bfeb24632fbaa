// Package agentproc supervises the host process a tier starts for a
// sandbox (the agent itself, or the sandbox's init): it captures the
// bounded log, observes the exit, and answers the sandbox.Instance
// questions every such tier shares.
package agentproc

import (
	"os"
	"os/exec"
	"strings"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/spawnthread"
)

// Proc is one started process.
type Proc struct {
	cmd    *exec.Cmd
	logs   *logbuf.Buffer
	ep     client.Endpoint
	exited chan struct{}
}

// LogLimit bounds what is kept of a process's output.
const LogLimit = 64 << 10

// Start starts cmd (from the permanent spawning thread, so a parent-death
// signal fires only when this process dies) with its output captured.
func Start(cmd *exec.Cmd, ep client.Endpoint) (*Proc, error) {
	p := &Proc{cmd: cmd, logs: logbuf.New(LogLimit), ep: ep, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	var err error
	if spawnthread.Do(func() { err = cmd.Start() }); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Endpoint says how to reach the agent.
func (p *Proc) Endpoint() client.Endpoint { return p.ep }

// SetEndpoint replaces the endpoint (known only once the process runs).
func (p *Proc) SetEndpoint(ep client.Endpoint) { p.ep = ep }

// Exited is closed once the process has exited and been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// ExitCode is the exit status once Exited is closed.
func (p *Proc) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// Signal delivers sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL.
func (p *Proc) Kill() error { return p.cmd.Process.Kill() }

// Diagnostics is what the process printed (bounded).
func (p *Proc) Diagnostics() string { return strings.TrimSpace(p.logs.String()) }

// Log gives a writer into the same bounded log, for the tier's own notes.
func (p *Proc) Log() *logbuf.Buffer { return p.logs }
