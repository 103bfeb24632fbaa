package host

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/cordon-sandbox/cordon/agent/clonexec"
	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/internal/spawnthread"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// OwnedUserns holds a user namespace mapping ids 0 to size-1 to the host's
// from base on, owned by base rather than by root, for an OCI runtime to
// join (its path is path): the kernel charges what a namespace's users
// hold of the per-user limits (inotify instances and watches, tasks) to
// its owner in the parent namespace too, and a runtime that makes the
// namespace itself makes it root's, whose counts every sandbox would then
// share. release lets the holder go once the container has joined. Where
// clonexec cannot start the holder (and so make the namespace base's),
// there is none: path is "", and the runtime makes the namespace.
func OwnedUserns(agent string, base, size int) (path string, release func(), err error) {
	maps := []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: size}}
	if !clonexec.Supported(holderAttr(maps, maps)) || os.Geteuid() != 0 {
		return "", func() {}, nil
	}
	pid, release, err := startHolder(agent, maps, maps)
	if err != nil {
		return "", nil, err
	}
	return "/proc/" + strconv.Itoa(pid) + "/ns/user", release, nil
}

func holderAttr(uids, gids []syscall.SysProcIDMap) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: uids, GidMappings: gids, Pdeathsig: syscall.SIGKILL}
}

// startHolder starts cordon-agent holding a new user namespace of these
// maps (sandboxinit.HoldArg: it waits on its standard input), and returns
// its pid and how to let it go. clonexec starts it where it can, which
// makes the namespace owned by the host id its root maps to; elsewhere it
// is forked, and the namespace is root's.
func startHolder(agent string, uids, gids []syscall.SysProcIDMap) (pid int, release func(), err error) {
	sys := holderAttr(uids, gids)
	if !clonexec.Supported(sys) {
		cmd := exec.Command(agent, sandboxinit.HoldArg)
		cmd.Args[0] = "cordon-agent"
		cmd.Env = []string{}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 0, nil, err
		}
		cmd.SysProcAttr = sys
		if spawnthread.Do(func() { err = cmd.Start() }); err != nil {
			return 0, nil, fmt.Errorf("%w: a user namespace: %v", sandbox.ErrUnavailable, err)
		}
		return cmd.Process.Pid, func() {
			_ = cmd.Process.Kill()
			stdin.Close()
			_ = cmd.Wait()
		}, nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, nil, err
	}
	null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return 0, nil, err
	}
	var pidfd int
	spawnthread.Do(func() {
		pid, pidfd, err = clonexec.Start(agent, []string{"cordon-agent", sandboxinit.HoldArg}, []string{}, "/", []int{p[0], null, null}, sys, nil, nil)
	})
	unix.Close(p[0])
	unix.Close(null)
	if err != nil {
		unix.Close(p[1])
		return 0, nil, fmt.Errorf("%w: a user namespace: %v", sandbox.ErrUnavailable, err)
	}
	return pid, func() {
		unix.Close(p[1])
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
		unix.Close(pidfd)
	}, nil
}
