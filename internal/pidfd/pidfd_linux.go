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

// FD is an open pidfd: it signals the process it names, or waits for its
// exit, until it is closed.
type FD struct {
	mu sync.Mutex
	fd int // -1 once closed
}

// NewFD takes ownership of fd, a pidfd.
func NewFD(fd int) *FD { return &FD{fd: fd} }

// Signal sends sig through the pidfd.
func (f *FD) Signal(sig os.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd < 0 {
		return os.ErrProcessDone
	}
	return unix.PidfdSendSignal(f.fd, sig.(syscall.Signal), nil, 0)
}

// Kill sends SIGKILL.
func (f *FD) Kill() error { return f.Signal(syscall.SIGKILL) }

// Close closes the pidfd; later signals answer os.ErrProcessDone. A Proc
// closed before its process ended stops watching it.
func (f *FD) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
}

// Wait blocks (holding a thread) until the process has exited, or the
// pidfd cannot be polled.
func (f *FD) Wait() {
	f.mu.Lock()
	fds := []unix.PollFd{{Fd: int32(f.fd), Events: unix.POLLIN}}
	f.mu.Unlock()
	for {
		n, err := unix.Poll(fds, -1)
		if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			return
		}
	}
}

// Proc is one watched process.
type Proc struct {
	*FD
	pid    int
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
	p := &Proc{FD: NewFD(fd), pid: pid, exited: make(chan struct{})}
	go p.watch()
	return p, nil
}

func (p *Proc) watch() {
	p.Wait()
	p.Close()
	close(p.exited)
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.pid }

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }
