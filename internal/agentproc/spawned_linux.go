package agentproc

import (
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/spawner"
)

// StartSpawned starts what cmd describes through sp (see spawner.Start for
// what of cmd is used), with its output captured as Start does.
func StartSpawned(sp *spawner.Spawner, cmd *exec.Cmd, ep client.Endpoint) (*Proc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p := &Proc{logs: logbuf.New(LogLimit), ep: ep}
	sproc, err := sp.Start(cmd, w)
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	drain := p.capture(r)
	proc := &spawnedProcess{Process: sproc, exited: make(chan struct{})}
	go func() {
		<-sproc.Exited()
		drain()
		close(proc.exited)
	}()
	p.proc = proc
	return p, nil
}

type spawnedProcess struct {
	*spawner.Process
	exited chan struct{}
}

func (s *spawnedProcess) Exited() <-chan struct{} { return s.exited }

// capture copies r, the process's output, into p's log. drain, called once
// the process has exited, waits for the end of r and closes it: what the
// process wrote last is in the log before Exited closes, as with exec.Cmd's
// Wait. A descendant that kept the pipe open (none should outlive a
// sandbox's init) is not waited for long.
func (p *Proc) capture(r *os.File) (drain func()) {
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(p.logs, r)
		close(copied)
	}()
	return func() {
		select {
		case <-copied:
		case <-time.After(time.Second):
		}
		r.Close()
	}
}
