package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel send cmd TERM when this process ends, by
// any means: the private daemon then destroys its sandboxes.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
