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
	proc process
	logs *logbuf.Buffer
	ep   client.Endpoint
}

// process is a started process however it was started.
type process interface {
	Pid() int
	Signal(os.Signal) error
	Exited() <-chan struct{}
	ExitCode() int
}

// LogLimit bounds what is kept of a process's output.
const LogLimit = 64 << 10

// Start starts cmd (from the permanent spawning thread, so a parent-death
// signal fires only when this process dies) with its output captured.
func Start(cmd *exec.Cmd, ep client.Endpoint) (*Proc, error) {
	p := &Proc{logs: logbuf.New(LogLimit), ep: ep}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	var err error
	if spawnthread.Do(func() { err = cmd.Start() }); err != nil {
		return nil, err
	}
	c := &cmdProcess{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()
	p.proc = c
	return p, nil
}

type cmdProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (c *cmdProcess) Pid() int                   { return c.cmd.Process.Pid }
func (c *cmdProcess) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }
func (c *cmdProcess) Exited() <-chan struct{}    { return c.exited }
func (c *cmdProcess) ExitCode() int              { return c.cmd.ProcessState.ExitCode() }

// Pid is the process id.
func (p *Proc) Pid() int { return p.proc.Pid() }

// Endpoint says how to reach the agent.
func (p *Proc) Endpoint() client.Endpoint { return p.ep }

// SetEndpoint replaces the endpoint (known only once the process runs).
func (p *Proc) SetEndpoint(ep client.Endpoint) { p.ep = ep }

// Exited is closed once the process has exited and been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.proc.Exited() }

// ExitCode is the exit status once Exited is closed.
func (p *Proc) ExitCode() int { return p.proc.ExitCode() }

// Signal delivers sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.proc.Signal(sig) }

// Kill sends SIGKILL.
func (p *Proc) Kill() error { return p.proc.Signal(os.Kill) }

// Diagnostics is what the process printed (bounded).
func (p *Proc) Diagnostics() string { return strings.TrimSpace(p.logs.String()) }

// Log gives a writer into the same bounded log, for the tier's own notes.
func (p *Proc) Log() *logbuf.Buffer { return p.logs }
