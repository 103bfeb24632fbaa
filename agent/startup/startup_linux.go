package startup

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReadyTo is an Options.Ready that writes the record to the descriptor fd
// and closes it: the host reads to the end of file.
func ReadyTo(fd int) func(record []byte) {
	return func(record []byte) {
		// A host that reads only for the end of file ignores the record.
		_, _ = unix.Write(fd, record)
		unix.Close(fd)
	}
}

// ListenUnix listens on a unix socket at path, its owner's alone (mode
// 0700). A stale socket from an earlier run is replaced; anything else at
// the path is left alone.
func ListenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		_ = os.Remove(path)
	}
	old := unix.Umask(0o077)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	return ln, err
}

// OpenOOMScore opens this process's oom_score_adj for Options.OOMScore:
// before the agent takes its own identity, while the file is still its
// own to open (a non-dumpable process's /proc files are root's).
func OpenOOMScore() *os.File {
	f, err := os.OpenFile("/proc/self/oom_score_adj", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return f
}

// NewCommandThread starts a goroutine locked to its own thread for good,
// runs setup there, and returns a function that runs work on that thread
// (Options.CommandThread) and the thread's id (Options.CommandThreadID).
func NewCommandThread(setup func() error) (func(func()), int, error) {
	commands, serve := CommandQueue()
	ready := make(chan error, 1)
	var tid int
	go func() {
		runtime.LockOSThread() // never unlocked: the thread carries setup's effects
		tid = unix.Gettid()
		if err := setup(); err != nil {
			ready <- err
			return
		}
		ready <- nil
		serve()
	}()
	if err := <-ready; err != nil {
		return nil, 0, err
	}
	return commands, tid, nil
}

// CommandQueue is NewCommandThread for a caller that brings its own locked
// thread: serve, called there, runs for good whatever commands is given.
func CommandQueue() (commands func(func()), serve func()) {
	work := make(chan func())
	return func(f func()) {
			done := make(chan struct{})
			work <- func() { f(); close(done) }
			<-done
		}, func() {
			for f := range work {
				f()
			}
		}
}
