//go:build !(linux && amd64)

package clonexec

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Available is false here: the child's steps are written for linux/amd64
// only. Callers use syscall.ForkExec.
const Available = false

const sysCloseRange, sysExitGroup = 0, 0 // no helper starts here

// Supported is false here (see Available).
func Supported(sys *syscall.SysProcAttr) bool { return false }

// Start is not available here (see Supported).
func Start(path string, argv, env []string, dir string, files []int, sys *syscall.SysProcAttr, nofile *unix.Rlimit, helper *Helper) (pid, pidfd int, err error) {
	return 0, -1, errors.New("clonexec: not available on this platform")
}

// Check is not available here (see Supported).
func Check(sys *syscall.SysProcAttr) error {
	return errors.New("clonexec: not available on this platform")
}
