package main

import (
	"os/exec"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/spawnthread"
)

// startTied starts cmd so that the kernel sends it TERM when this process
// ends, by any means: the private daemon then destroys its sandboxes. The
// signal follows the thread that forked cmd, so cmd is forked from one
// that lives as long as this process.
func startTied(cmd *exec.Cmd) (err error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	spawnthread.Do(func() { err = cmd.Start() })
	return err
}
