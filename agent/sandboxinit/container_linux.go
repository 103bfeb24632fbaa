package sandboxinit

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/cordon-sandbox/cordon/agent/startup"
	"github.com/cordon-sandbox/cordon/baseline"
	"golang.org/x/sys/unix"
)

const (
	// EnvLandlock is "require" (refuse to start without Landlock) or
	// "auto" (use it where the kernel has it); unset or "off", none.
	EnvLandlock = baseline.EnvPrefix + "LANDLOCK"
	// EnvWritable lists, colon-separated, the absolute directories
	// commands may write under.
	EnvWritable = baseline.EnvPrefix + "WRITABLE"
	// EnvWorkload, "UID:GID", is the workload's user, for an agent that an
	// OCI runtime starts as root of the sandbox (with CAP_SETUID,
	// CAP_SETGID, CAP_SETPCAP and CAP_CHOWN only, and under gVisor
	// CAP_SYS_PTRACE, ptraceCap): the agent makes its socket its own and
	// takes its identity (becomeAgent), and its commands get this
	// package's seccomp filter.
	EnvWorkload = baseline.EnvPrefix + "WORKLOAD_USER"
	// EnvSocket is the agent's socket (agent.Config.Socket).
	EnvSocket = baseline.EnvPrefix + "SOCKET"
	// EnvCommandPids, "N:DIR", holds the thread commands are forked from
	// (and so every command and all it starts) in a pids cgroup of N below
	// the agent's, in the cgroup v1 pids hierarchy mounted at DIR, which
	// the agent then closes to everyone else: a user-space kernel (gVisor)
	// whose own cgroups are mounted in the sandbox, where the host's hold
	// the kernel and not the workload.
	EnvCommandPids = baseline.EnvPrefix + "COMMAND_PIDS"
	// EnvScratchModes=1 gives each of baseline.ScratchDirs its mode, and
	// the owned ones to the workload, before the agent drops root's
	// identity: a runtime whose writable volumes cannot be given either
	// (a cluster's emptyDir, made 0777 and root's) mounts them bare.
	EnvScratchModes = baseline.EnvPrefix + "SCRATCH_MODES"
	// EnvTasks, N, lowers RLIMIT_NPROC, soft and hard, to N for the agent
	// and every command (capTasks), for a runtime that should not set it
	// itself: runc sets a container's rlimits from outside, which a
	// namespace root does not own (host.OwnedUserns) lets only a root
	// with CAP_SYS_RESOURCE do.
	EnvTasks = baseline.EnvPrefix + "TASKS"
)

// CommandThreadName is the name of the thread an agent started by an OCI
// runtime forks every command from, unless that is its first thread: a
// host that holds the workload's pids apart from the agent's moves that
// thread into a cgroup of its own.
const CommandThreadName = "cordon-commands"

// ContainerOptions is what an agent that an OCI runtime started, or that
// the process tier's init executed, does before it serves (read from env):
//   - with EnvWorkload, it listens on its socket (EnvSocket) as root and
//     gives the socket to its own id (mode 0600: the workload cannot
//     connect), or without one serves TCP (agent.Config.LocalGuests), and
//     takes the agent's identity on every thread;
//   - it makes the thread every command is forked from: with EnvWorkload,
//     that thread's bounding set is emptied and it takes this package's
//     seccomp filter (the runtime's filter may lack calls its libseccomp
//     does not know, and gVisor's sentry, which applies the runtime's
//     filter, needs clone3 refused here); with EnvLandlock, its Landlock
//     domain allows writes only under the writable directories (the
//     agent's other threads stay unconfined, so they can still inspect
//     and signal the commands, which a sibling domain could not); and an
//     inheritable or ambient capability the agent was handed (the process
//     tier's executed agent) is cleared there, so no command inherits it.
//
// Landlock needs no_new_privs, which the runtime set.
func ContainerOptions(env []string) (startup.Options, error) {
	var mode, list, workload, socket, pids, tasks string
	scratch := false
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case EnvScratchModes:
			scratch = v == "1"
		case EnvCommandPids:
			pids = v
		case EnvLandlock:
			mode = v
		case EnvWritable:
			list = v
		case EnvWorkload:
			workload = v
		case EnvSocket:
			socket = v
		case EnvTasks:
			tasks = v
		}
	}
	if tasks != "" {
		n, err := strconv.ParseUint(tasks, 10, 64)
		if err != nil || n == 0 {
			return startup.Options{}, fmt.Errorf("%s=%q: want a number of tasks", EnvTasks, tasks)
		}
		if err := capTasks(n); err != nil {
			return startup.Options{}, err
		}
	}
	switch mode {
	case "", "off", "auto", "require":
	default:
		return startup.Options{}, fmt.Errorf("%s=%q: want require, auto or off", EnvLandlock, mode)
	}
	landlock := mode == "auto" || mode == "require"
	abi := 0
	if landlock {
		if abi = LandlockABI(); abi < 1 && mode == "require" {
			return startup.Options{}, fmt.Errorf("landlock required but this kernel does not provide it")
		}
	}
	var writable []string
	for _, w := range strings.Split(list, ":") {
		if w == "" {
			continue
		}
		if !filepath.IsAbs(w) || filepath.Clean(w) != w {
			return startup.Options{}, fmt.Errorf("%s: %q is not a clean absolute path", EnvWritable, w)
		}
		writable = append(writable, w)
	}
	uid, gid := -1, -1
	if workload != "" {
		u, g, ok := strings.Cut(workload, ":")
		var err1, err2 error
		uid, err1 = strconv.Atoi(u)
		gid, err2 = strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 || uid >= AgentID || gid >= AgentID {
			return startup.Options{}, fmt.Errorf("%s=%q: want UID:GID below %d", EnvWorkload, workload, AgentID)
		}
		if cgoBuild {
			return startup.Options{}, errCgo
		}
	}
	inherited := !inheritableEmpty()
	if inherited {
		// An agent executed with the agent's identity (the process tier's
		// init executes a cgo build): the exec made its saved ids its
		// effective ones, the workload's, which would let the workload
		// signal it; they are its real ones again (libc changes every
		// thread's).
		r, _, _ := unix.Getresuid()
		rg, _, _ := unix.Getresgid()
		if err := syscall.Setresgid(-1, -1, rg); err != nil {
			return startup.Options{}, fmt.Errorf("saved gid: %w", err)
		}
		if err := syscall.Setresuid(-1, -1, r); err != nil {
			return startup.Options{}, fmt.Errorf("saved uid: %w", err)
		}
	}
	if uid < 0 && !landlock && !inherited {
		return startup.Options{}, nil
	}
	if err := noCoreDumps(); err != nil {
		return startup.Options{}, err
	}
	var opts startup.Options
	if uid >= 0 {
		opts.OOMScore = startup.OpenOOMScore() // before the agent's identity
		if scratch {
			if err := scratchModes(uid, gid); err != nil {
				return startup.Options{}, err
			}
		}
	}
	commands, tid, err := startup.NewCommandThread(func() error {
		// The host finds the thread by its name (CommandThreadName), or
		// as the first thread, which keeps the agent's name.
		if unix.Gettid() != unix.Getpid() {
			if name, err := unix.BytePtrFromString(CommandThreadName); err == nil {
				_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
			}
		}
		if uid >= 0 {
			if err := dropBoundingSet(oneThread); err != nil {
				return err
			}
		}
		if abi >= 1 {
			fd, err := buildRuleset(abi, writeRules(abi, writable))
			if err != nil {
				return err
			}
			if err := restrictSelf(fd); err != nil {
				return err
			}
		}
		if uid >= 0 || landlock {
			if err := installSeccomp(false); err != nil {
				return fmt.Errorf("seccomp: %w", err)
			}
		}
		return ClearInheritable()
	})
	if err != nil {
		return startup.Options{}, err
	}
	opts.CommandThread, opts.CommandThreadID = commands, tid
	if pids != "" {
		if err := holdCommandPids(pids, tid); err != nil {
			return startup.Options{}, err
		}
	}
	// The socket comes after the command thread has its name: a host
	// that waits for the socket and then moves that thread into the
	// workload's pids cgroup (host.HoldCommands) must find it. Without a
	// socket the agent serves TCP (a cluster's pod, reached on the pod
	// network): it listens itself, on an unprivileged port, once it is
	// the agent.
	if uid >= 0 && socket != "" {
		ln, err := ownSocket(socket)
		if err != nil {
			return startup.Options{}, err
		}
		opts.Listener = ln
	}
	if uid >= 0 {
		keep := uint32(agentCaps)
		if d, err := capData(); err == nil && d[0].Permitted&ptraceCap != 0 {
			keep |= ptraceCap
		}
		if err := becomeAgent(allThreads, AgentID, uid, gid, keep, false); err != nil {
			if opts.Listener != nil {
				opts.Listener.Close()
			}
			return startup.Options{}, err
		}
	}
	return opts, nil
}

// scratchModes gives each scratch directory its mode and, where the
// workload owns it, its owner (EnvScratchModes). Nothing of the workload
// runs yet; the mode goes first, while root still owns the directory.
func scratchModes(uid, gid int) error {
	for _, d := range baseline.ScratchDirs {
		fi, err := os.Lstat(d.Path)
		if err != nil {
			return fmt.Errorf("scratch directory: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("scratch directory %s is not a directory", d.Path)
		}
		// One that is already another's (a persistent workspace, given to
		// the workload by an earlier start) is taken back first: only its
		// owner may change its mode.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
			if err := os.Lchown(d.Path, 0, 0); err != nil {
				return fmt.Errorf("scratch directory %s: %w", d.Path, err)
			}
		}
		if err := unix.Chmod(d.Path, d.Mode); err != nil {
			return fmt.Errorf("scratch directory %s: %w", d.Path, err)
		}
		if d.Owned {
			if err := os.Lchown(d.Path, uid, gid); err != nil {
				return fmt.Errorf("scratch directory %s: %w", d.Path, err)
			}
		}
	}
	return nil
}

// ownSocket listens on path (replacing a stale socket there) and gives the
// socket to the agent's id, readable and writable by it alone.
func ownSocket(path string) (net.Listener, error) {
	// It is made under another name and renamed into place once it is
	// the agent's: the host, which waits for the name, never meets it
	// otherwise.
	tmp := path + ".new"
	ln, err := startup.ListenUnix(tmp)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	fail := func(what string, err error) (net.Listener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, tmp, 0o600, 0); err != nil {
		return fail("the agent's socket's mode", err)
	}
	if err := os.Lchown(tmp, AgentID, AgentID); err != nil {
		return fail("give the agent's socket to the agent", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail("the agent's socket", err)
	}
	return ln, nil
}

// holdCommandPids moves thread tid into a child pids cgroup of the
// agent's limited to N (spec "N:DIR", EnvCommandPids), then gives the
// hierarchy's mount, and the directory holding it, to the agent's id, mode
// 0700, so that nothing else inside (root without capabilities included)
// can raise the limit or leave the cgroup.
func holdCommandPids(spec string, tid int) error {
	n, dir, ok := strings.Cut(spec, ":")
	limit, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || limit < 1 || !filepath.IsAbs(dir) {
		return fmt.Errorf("%s=%q: want N:DIR", EnvCommandPids, spec)
	}
	cg := filepath.Join(dir, "commands")
	if err := os.Mkdir(cg, 0o755); err != nil {
		return fmt.Errorf("the commands' pids cgroup: %w", err)
	}
	for _, w := range []struct{ file, value string }{{"pids.max", n}, {"tasks", strconv.Itoa(tid)}} {
		if err := os.WriteFile(filepath.Join(cg, w.file), []byte(w.value), 0); err != nil {
			return fmt.Errorf("the commands' pids cgroup: %s: %w", w.file, err)
		}
	}
	// The hierarchy, and the directory the hierarchies are mounted in.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("close the cgroup hierarchies: %w", err)
		}
		if err := os.Chown(d, AgentID, AgentID); err != nil {
			return fmt.Errorf("close the cgroup hierarchies: %w", err)
		}
	}
	return nil
}
