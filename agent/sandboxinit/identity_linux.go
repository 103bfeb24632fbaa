package sandboxinit

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// The agent's identity. Where the sandbox's user namespace maps it (every
// sandbox started as root), the agent runs with real and saved ids of its
// own (wire.AgentID) and the workload's as its effective ones:
//   - the kernel lets a process signal, prlimit or trace another only when
//     its ids match the other's real or saved ids (or it holds a
//     capability), so the workload, which holds none, can do none of that
//     to its agent;
//   - the agent's effective (and so filesystem) ids are the workload's, so
//     what it writes for the host belongs to the workload, it reads what
//     the workload can, and it may signal the workload's processes;
//   - it keeps CAP_SETUID and CAP_SETGID (in the sandbox's user namespace,
//     whose ids are all unprivileged on the host) to start each command as
//     the workload's user; the command's exec drops them (no inheritable or
//     ambient set, an empty bounding set on the thread commands fork from).
//
// The scheduling calls (setpriority, sched_setaffinity) judge by effective
// ids alone: the workload may lower its agent's priority, which only slows
// it; the host holds every deadline (docs/security.md).

// agentCaps are the capabilities the agent keeps.
const agentCaps = 1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID

// ptraceCap, where the runtime grants it (gVisor's), is kept too: gVisor
// judges /proc/PID/fd, where the agent finds what still holds a command's
// output, by real ids (Linux, by the filesystem ids the agent shares with
// the workload). ptrace itself is refused by the seccomp filter.
const ptraceCap = 1 << unix.CAP_SYS_PTRACE

// becomeAgent gives this thread (and, with all, every thread) the agent's
// identity: real and saved ids agent, effective ids uid and gid, no
// supplementary groups, and caps (agentCaps, and ptraceCap where given)
// alone in the permitted and effective sets. With ambient, the capabilities also stay in the inheritable and
// ambient sets, to outlive the exec of an agent that is a program of its
// own (the caller set the inheritable set before it emptied the bounding
// set; the agent then clears both on the thread it forks commands from,
// ClearInheritable).
func becomeAgent(all syscaller, agent, uid, gid int, caps uint32, ambient bool) error {
	// Keep the permitted set across the change of ids off root.
	if err := all.call(unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1); err != nil {
		return fmt.Errorf("keep capabilities: %w", err)
	}
	if groups, err := unix.Getgroups(); err != nil || len(groups) > 0 {
		if err := all.call(unix.SYS_SETGROUPS, 0, 0); err != nil && err != unix.EPERM {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	if err := all.call(unix.SYS_SETRESGID, uintptr(agent), uintptr(gid), uintptr(agent)); err != nil {
		return fmt.Errorf("setresgid %d %d %d: %w", agent, gid, agent, err)
	}
	if err := all.call(unix.SYS_SETRESUID, uintptr(agent), uintptr(uid), uintptr(agent)); err != nil {
		return fmt.Errorf("setresuid %d %d %d: %w", agent, uid, agent, err)
	}
	var inh uint32
	if ambient {
		inh = caps
	}
	if err := setCaps(all, caps, caps, inh); err != nil {
		return fmt.Errorf("keep the agent's capabilities (%#x): %w", caps, err)
	}
	if ambient {
		for _, c := range []uintptr{unix.CAP_SETUID, unix.CAP_SETGID} {
			if err := all.call(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, c); err != nil {
				return fmt.Errorf("ambient capability %d: %w", c, err)
			}
		}
	}
	// (The keep-capabilities flag stays set: each command's exec clears
	// it, and the agent changes its ids no more. Clearing it would stop
	// every thread once more.)
	r, e, s := unix.Getresuid()
	d, err := capData()
	if err != nil || r != agent || e != uid || s != agent || d[0].Permitted != caps || d[0].Effective != caps ||
		d[0].Inheritable != inh || d[1] != (unix.CapUserData{}) {
		return fmt.Errorf("the agent's identity did not take: ids %d %d %d, capabilities %+v (%v)", r, e, s, d, err)
	}
	return nil
}

// setCaps sets the permitted, effective and inheritable capability sets
// (capabilities 0-31; the rest empty).
func setCaps(sc syscaller, permitted, effective, inheritable uint32) error {
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	data[0] = unix.CapUserData{Permitted: permitted, Effective: effective, Inheritable: inheritable}
	err := sc.call(unix.SYS_CAPSET, uintptr(unsafePointer(hdr)), uintptr(unsafePointer(&data[0])))
	runtime.KeepAlive(hdr)
	runtime.KeepAlive(data)
	return err
}

// ClearInheritable empties this thread's inheritable and ambient sets (an
// agent that was handed capabilities through its exec, becomeAgent's
// ambient, clears them on the thread it forks commands from), keeping its
// permitted and effective ones.
func ClearInheritable() error {
	d, err := capData()
	if err != nil {
		return err
	}
	if d[0].Inheritable == 0 && d[1].Inheritable == 0 {
		return nil
	}
	if err := oneThread.call(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if err := setCaps(oneThread, d[0].Permitted, d[0].Effective, 0); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	return nil
}

// errCgo: a cgo build cannot change every thread's credentials (see
// EnterContainer).
var errCgo = errors.New("cordon-agent was built with cgo, which cannot give every thread the agent's identity; build it with CGO_ENABLED=0, as scripts/setup.sh does")
