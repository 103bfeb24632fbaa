// Package pidfd watches and signals a process this one did not start (or
// does not wait for) through a pidfd, which names the process for good once
// opened: no signal can reach a later process that reused its pid.
package pidfd

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/procid"
	"golang.org/x/sys/unix"
)

// ErrGone: the process named is not (or no longer) running.
var ErrGone = errors.New("process is gone")

// Proc is one watched process.
type Proc struct {
	pid    int
	mu     sync.Mutex
	fd     int // -1 once the process has exited
	exited chan struct{}
}

// Open watches pid, which must be the process that started at start (see
// procid); an empty start accepts whatever pid names now.
func Open(pid int, start string) (*Proc, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: pid %d", ErrGone, pid)
	}
	// Checked after the pidfd is open: the pid cannot be reused under it.
	if start != "" && !procid.Alive(pid, start) {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: pid %d", ErrGone, pid)
	}
	p := &Proc{pid: pid, fd: fd, exited: make(chan struct{})}
	go p.watch()
	return p, nil
}

func (p *Proc) watch() {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			break
		}
	}
	p.Close()
	close(p.exited)
}

// Close stops watching (Exited is then closed only if the process ended).
func (p *Proc) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.pid }

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Signal sends sig through the pidfd.
func (p *Proc) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return os.ErrProcessDone
	}
	return unix.PidfdSendSignal(p.fd, sig.(syscall.Signal), nil, 0)
}

// Kill sends SIGKILL.
func (p *Proc) Kill() error { return p.Signal(syscall.SIGKILL) }
