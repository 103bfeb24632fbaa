package agentproc

import (
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/clonexec"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/pidfd"
	"github.com/cordon-sandbox/cordon/internal/spawnthread"
	"golang.org/x/sys/unix"
)

// StartCloned starts what cmd describes (Path, Args, Env, Dir, ExtraFiles
// and a SysProcAttr that clonexec.Supported accepts) with clonexec, from the
// permanent spawning thread, its output captured as Start does. nofile is
// this process's original RLIMIT_NOFILE (clonexec.OriginalNofile). Its exit
// is watched through its pidfd, with no thread waiting.
func StartCloned(cmd *exec.Cmd, nofile *unix.Rlimit, ep client.Endpoint, helper *clonexec.Helper) (*Proc, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	files := []int{int(null.Fd()), int(w.Fd()), int(w.Fd())}
	for _, f := range cmd.ExtraFiles {
		files = append(files, int(f.Fd()))
	}
	var pid, fd int
	spawnthread.Do(func() {
		pid, fd, err = clonexec.Start(cmd.Path, cmd.Args, cmd.Env, cmd.Dir, files, cmd.SysProcAttr, nofile, helper)
	})
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	p := &Proc{logs: logbuf.New(LogLimit), ep: ep}
	c := &clonedProcess{FD: pidfd.NewFD(fd), pid: pid, status: -1, exited: make(chan struct{})}
	go c.wait(fd, p.capture(r))
	p.proc = c
	return p, nil
}

// clonedProcess is a child of this process's, started by clonexec.
type clonedProcess struct {
	*pidfd.FD // signals go through it; closed once the process is reaped
	pid       int
	mu        sync.Mutex
	status    int // raw wait status, -1 until reaped
	exited    chan struct{}
}

// wait reaps the process once its pidfd says it has exited, and drains its
// log. The poller watches a duplicate of the pidfd (an *os.File owns what
// it is given).
func (c *clonedProcess) wait(fd int, drain func()) {
	var ws unix.WaitStatus
	reaped := false
	if dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
		_ = unix.SetNonblock(dup, true)
		f := os.NewFile(uintptr(dup), "pidfd")
		if rc, err := f.SyscallConn(); err == nil {
			_ = rc.Read(func(uintptr) bool {
				pid, err := unix.Wait4(c.pid, &ws, unix.WNOHANG, nil)
				reaped = pid == c.pid || (err != nil && err != unix.EINTR)
				return reaped
			})
		}
		f.Close()
	}
	if !reaped {
		// No poller for it: wait holding a thread.
		for {
			if _, err := unix.Wait4(c.pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
	}
	drain()
	c.mu.Lock()
	c.status = int(ws)
	c.mu.Unlock()
	c.Close()
	close(c.exited)
}

func (c *clonedProcess) Pid() int                { return c.pid }
func (c *clonedProcess) Exited() <-chan struct{} { return c.exited }

// ExitCode is as exec.Cmd's ProcessState.ExitCode: -1 when a signal ended
// the process.
func (c *clonedProcess) ExitCode() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := syscall.WaitStatus(c.status)
	if c.status < 0 || !ws.Exited() {
		return -1
	}
	return ws.ExitStatus()
}
