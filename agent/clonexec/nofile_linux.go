package clonexec

import (
	"fmt"
	"runtime"
	"syscall"

	"github.com/cordon-sandbox/cordon/agent/clonexec/internal/startnofile"
	"golang.org/x/sys/unix"
)

// OriginalNofile learns the RLIMIT_NOFILE this process started with. The Go
// runtime raises the soft limit at start-up and gives the original back to
// the processes syscall.ForkExec starts, but keeps it to itself. On amd64
// and arm64 it was read before that raise (startnofile). Elsewhere it is
// what a child of this process's own has: exe (this process's executable)
// is started traced, and read while it is stopped at its exec, before any
// of its code runs, then killed (1–1.5 ms of a fresh `cordon run` on our
// machines); that fails where tracing is not allowed.
func OriginalNofile(exe string) (unix.Rlimit, error) {
	if cur, max, ok := startnofile.Limit(); ok {
		return unix.Rlimit{Cur: cur, Max: max}, nil
	}
	return tracedNofile(exe)
}

// tracedNofile is OriginalNofile read from a traced child.
func tracedNofile(exe string) (unix.Rlimit, error) {
	var lim unix.Rlimit
	// The tracer is the thread that started the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := syscall.ForkExec(exe, []string{exe}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Ptrace: true, Pdeathsig: syscall.SIGKILL}})
	if err != nil {
		return lim, fmt.Errorf("clonexec: start %s traced: %w", exe, err)
	}
	defer func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != unix.EINTR {
				break
			}
		}
	}()
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(pid, &ws, unix.WALL, nil)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil || !ws.Stopped() {
		return lim, fmt.Errorf("clonexec: %s did not stop at its exec (%v)", exe, err)
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &lim); err != nil {
		return lim, fmt.Errorf("clonexec: read the limit: %w", err)
	}
	return lim, nil
}
