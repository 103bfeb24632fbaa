package sandboxinit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/cordon-sandbox/cordon/agent/startup"
	"github.com/cordon-sandbox/cordon/baseline"

	"golang.org/x/sys/unix"
)

// Main runs the init stage and never returns on success: it becomes the
// agent (start, in this process) or executes it. On failure it prints why
// and returns 1.
func Main(start StartAgent) int {
	runtime.LockOSThread()
	// Started by descriptor (clonexec, when a helper builds the root), the
	// init is named by the descriptor's number on kernels before 6.14.
	if name, err := unix.BytePtrFromString("cordon-agent"); err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
	}
	// Descriptors inherited from the host (other than the configuration)
	// must not reach the sandbox.
	if err := unix.CloseRange(ReadyFD, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fmt.Fprintf(os.Stderr, "cordon-agent sandbox-init: %v\n", err)
		return 1
	}
	cfg, err := readConfig()
	if err == nil {
		err = run(cfg, start)
	}
	fmt.Fprintf(os.Stderr, "cordon-agent sandbox-init: %v\n", err)
	return 1
}

func readConfig() (*Config, error) {
	// The trees come with the first bytes; the rest is read to the end. A
	// configuration is a few KiB: a larger first buffer is only memory to
	// fault in (64 KiB was 16 page faults, 0.2 ms here).
	first := make([]byte, 8<<10)
	oob := make([]byte, unix.CmsgSpace(MaxTrees*4))
	n, oobn, flags, _, err := unix.Recvmsg(ConfigFD, first, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	trees, err := ReceivedFDs(oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("the configuration's layout trees: %w", err)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return nil, fmt.Errorf("the configuration carried more than %d layout trees", MaxTrees)
	}
	f := os.NewFile(ConfigFD, "config")
	rest, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	var cfg Config
	if err := decodeConfig(append(first[:n], rest...), &cfg); err != nil {
		return nil, fmt.Errorf("decoding the configuration: %w", err)
	}
	cfg.trees = trees
	return &cfg, nil
}

func run(cfg *Config, start StartAgent) error {
	// The host placed this process in the sandbox's cgroups before sending
	// the configuration: make them the root of what the sandbox can see.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("cgroup namespace: %w", err)
	}
	// Open ourselves by /proc/self/exe: the host's path to this binary is
	// gone once the root is entered, which a helper may do at any moment.
	self, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open self: %w", err)
	}
	abi := LandlockABI()
	if cfg.Landlock == "require" && abi < 1 {
		return fmt.Errorf("landlock required but this kernel does not provide it")
	}
	if cfg.PlacedTrees < 0 || cfg.PlacedTrees > MaxTrees || cfg.PlacedTrees > 0 && len(cfg.trees) > 0 {
		return fmt.Errorf("layout trees: %d placed, %d sent", cfg.PlacedTrees, len(cfg.trees))
	}
	for i := range cfg.PlacedTrees {
		cfg.trees = append(cfg.trees, TreeFD+i)
	}
	if cfg.RootBuilder > 0 {
		err = awaitRootBuilder(cfg)
	} else {
		err = buildRoot(cfg)
	}
	if err != nil {
		return err
	}
	// The plan ended in the new root (enter).
	if err := os.Chdir(cfg.Workdir); err != nil {
		return err
	}
	// The workload, not the agent, is what an OOM kill should pick.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("500"), 0)
	if cfg.Tasks > 0 {
		if err := capTasks(cfg.Tasks); err != nil {
			return err
		}
	}
	if err := noCoreDumps(); err != nil {
		return err
	}
	// Becoming the agent in this very process saves a second program
	// start; it needs every thread confined, which a cgo build cannot do.
	// Then the confined thread execs the agent instead. (Known at build
	// time: asking the runtime costs a stop of every thread.)
	sc, inProcess := allThreads, true
	if cgoBuild {
		sc, inProcess = oneThread, false
	}
	// This thread, locked since Main began, is the one every command is
	// forked from (in place: it serves the agent's forks for good) or the
	// one that execs the agent. The bounding set is per thread, and
	// emptying it takes one system call per capability: on every thread of
	// a Go process each is a stop-the-world, some 7 ms in all. It is
	// emptied here only (while this thread still holds CAP_SETPCAP), so
	// every command and all it starts inherit an empty set; the agent's
	// own threads keep theirs, which gives them nothing: they hold no
	// capability in any other set and have no_new_privs, so no execve and
	// no capset can raise one.
	oomScore := startup.OpenOOMScore() // while this process's /proc files are its own
	apart := cfg.AgentUID > 0
	if apart && !inProcess {
		// An agent executed as a program of its own takes its
		// capabilities through the exec, as inheritable ones, which must
		// be set while the bounding set still holds them.
		if err := addInheritable(agentCaps); err != nil {
			return err
		}
	}
	if err := dropBoundingSet(oneThread); err != nil {
		return err
	}
	if apart {
		err = becomeAgent(sc, cfg.AgentUID, cfg.UID, cfg.GID, agentCaps, !inProcess)
	} else {
		err = becomeWorkload(sc, cfg.UID, cfg.GID)
	}
	if err != nil {
		return err
	}
	if err := restrictThread(cfg.Detached); err != nil {
		return err
	}
	// A Landlock domain is per thread, and each thread's own call makes a
	// sibling domain that may not inspect the others' children: it goes on
	// this thread.
	ruleset := -1
	if abi >= 1 && cfg.Landlock != "off" {
		if ruleset, err = buildRuleset(abi, landlockRules(cfg, abi)); err != nil {
			return err
		}
		if err := restrictSelf(ruleset); err != nil {
			return err
		}
	}
	if err := installSeccomp(inProcess); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	if inProcess {
		unix.Close(self)
		ln, err := agentListener()
		if err != nil {
			return err
		}
		// The agent starts here, on this thread, and the thread serves its
		// commands once it is ready: the agent's other goroutines need
		// another thread only from then on, while the host admits it.
		// It is this process's first thread, which the ready record names
		// so that the host holds its pids apart (CommandsApart); the
		// agent then needs no spare threads.
		env := cfg.Env
		if cfg.CommandsApart {
			env = append(slices.Clip(env), baseline.EnvPrefix+"SPARE_THREADS=0")
		}
		commands, serve := startup.CommandQueue()
		wait, code := start(env, startup.Options{
			CommandThread:   commands,
			CommandThreadID: unix.Gettid(),
			Ready:           startup.ReadyTo(ReadyFD),
			Listener:        ln,
			OOMScore:        oomScore,
		})
		if wait == nil {
			os.Exit(code)
		}
		go func() { os.Exit(wait()) }()
		serve()
	}
	env, err := handOverToken(cfg.Env)
	if err != nil {
		return err
	}
	// The agent, a program of its own from here, hands the host its ready
	// record on the same pipe (without it the host would poll the socket)
	// and serves on the socket the host made.
	if env, err = passOn(env, "READY_FD", ReadyFD); err != nil {
		return fmt.Errorf("readiness pipe: %w", err)
	}
	if env, err = passOn(env, "LISTEN_FD", ListenFD); err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	argv := []string{"cordon-agent"}
	return fmt.Errorf("exec agent: %w", execveat(self, argv, env))
}

// awaitRootBuilder waits for the helper building the root (see
// Config.RootBuilder), then closes this process's copies of the layout
// trees it attached.
func awaitRootBuilder(cfg *Config) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(cfg.RootBuilder, &ws, 0, nil)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			return fmt.Errorf("waiting for the root's builder: %w", err)
		}
	}
	for _, fd := range cfg.trees {
		unix.Close(fd)
	}
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return nil
	case ws.Exited():
		return fmt.Errorf("the root's builder failed (exit status %d): the host names the step", ws.ExitStatus())
	default:
		return fmt.Errorf("the root's builder ended by %v", ws.Signal())
	}
}

// passOn keeps fd open across the agent's exec and names it to the agent
// as CORDON_AGENT_<name> in env.
func passOn(env []string, name string, fd int) ([]string, error) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return env, err
	}
	return append(env, fmt.Sprintf("%s%s=%d", baseline.EnvPrefix, name, fd)), nil
}

// agentListener is the agent's socket, made by the host and placed at
// ListenFD, listening. The host made it as its own user, mode 0600 (as
// root, a user the sandbox does not map: nothing inside may connect to
// it), in a directory the root's plan binds read-only.
func agentListener() (net.Listener, error) {
	f := os.NewFile(ListenFD, "agent socket")
	ln, err := net.FileListener(f) // a duplicate
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	return ln, nil
}

// capTasks lowers RLIMIT_NPROC, soft and hard, to n (or keeps a lower one
// inherited). The kernel counts it per user of the sandbox's own user
// namespace, so it bounds this sandbox alone; raising it back needs a
// capability the sandbox never has.
func capTasks(n uint64) error {
	var lim unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_NPROC, nil, &lim); err != nil {
		return fmt.Errorf("task limit: %w", err)
	}
	lim.Cur, lim.Max = min(lim.Cur, n), min(lim.Max, n)
	if err := unix.Prlimit(0, unix.RLIMIT_NPROC, &lim, nil); err != nil {
		return fmt.Errorf("task limit: %w", err)
	}
	return nil
}

// noCoreDumps lowers RLIMIT_CORE, soft and hard, to 0 for the agent and
// every command: a crash in the sandbox must not reach the host's core
// handler, which, where the host's core_pattern is a pipe (apport,
// systemd-coredump), is a program the host runs as root, in its own
// namespaces, on a dump the workload shaped. Nothing in the sandbox can
// raise it again.
func noCoreDumps() error {
	if err := unix.Prlimit(0, unix.RLIMIT_CORE, &unix.Rlimit{}, nil); err != nil {
		return fmt.Errorf("core dumps: %w", err)
	}
	return nil
}

// syscaller runs a system call on the thread that will exec (oneThread) or
// on every thread of the process (allThreads), since credentials, the
// bounding set, no_new_privs and Landlock domains are all per thread.
type syscaller func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, syscall.Errno)

var (
	oneThread  syscaller = syscall.RawSyscall6
	allThreads syscaller = syscall.AllThreadsSyscall6
)

func (sc syscaller) call(trap uintptr, args ...uintptr) error {
	var a [6]uintptr
	copy(a[:], args)
	if _, _, errno := sc(trap, a[0], a[1], a[2], a[3], a[4], a[5]); errno != 0 {
		return errno
	}
	return nil
}

// dropBoundingSet empties the capability bounding set: every capability
// up to the first the kernel does not know (EINVAL), which saves reading
// cap_last_cap.
func dropBoundingSet(sc syscaller) error {
	for c := 0; c < 64; c++ {
		err := sc.call(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c))
		if err == unix.EINVAL {
			return nil
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// becomeWorkload switches to uid/gid with no supplementary groups and
// clears every capability set (the bounding set is already empty), for a
// sandbox whose agent cannot have ids of its own (one mapped id, without
// root). all reaches every thread whose credentials must change
// (allThreads in place, oneThread on the exec path); each such call stops
// every thread of a Go process, so only the credential changes themselves
// go through it. Moving every uid off 0 clears the permitted, effective
// and ambient sets by itself (capabilities(7)); only the inheritable set
// survives, and it is empty unless the host passed one, which this thread
// shows. Otherwise (root inside, or an inheritable set) every set is
// cleared explicitly, on every thread. Either way this thread's sets are
// then checked empty.
func becomeWorkload(all syscaller, uid, gid int) error {
	fixup := uid != 0 && inheritableEmpty()
	if !fixup {
		if err := all.call(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil {
			return fmt.Errorf("clear ambient capabilities: %w", err)
		}
	}
	// The host dropped its supplementary groups at the clone where it could
	// (as root); an unprivileged caller's stay, since the kernel denies
	// setgroups in a user namespace mapped without privilege.
	if groups, err := unix.Getgroups(); err != nil || len(groups) > 0 {
		if err := all.call(unix.SYS_SETGROUPS, 0, 0); err != nil && err != unix.EPERM {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	if err := all.call(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); err != nil {
		return fmt.Errorf("setresgid %d: %w", gid, err)
	}
	if err := all.call(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); err != nil {
		return fmt.Errorf("setresuid %d: %w", uid, err)
	}
	if !fixup {
		if err := setCaps(all, 0, 0, 0); err != nil {
			return fmt.Errorf("clear capabilities: %w", err)
		}
	}
	if !capsEmpty() {
		return errors.New("a capability survived the change of user")
	}
	return nil
}

// restrictThread sets no_new_privs and the parent-death signal, per-thread
// flags, on this thread, which forks every command (or execs the agent):
// seccomp's thread sync, installed next, gives every other thread
// no_new_privs, and the parent-death signal of any one thread kills the
// whole process. The credential change cleared the parent-death signal;
// it is set again unless the sandbox is to outlive its creator.
func restrictThread(detached bool) error {
	if !detached {
		if err := oneThread.call(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL)); err != nil {
			return err
		}
	}
	if err := oneThread.call(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

// addInheritable adds caps to this thread's inheritable set.
func addInheritable(caps uint32) error {
	d, err := capData()
	if err != nil {
		return err
	}
	if err := setCaps(oneThread, d[0].Permitted, d[0].Effective, d[0].Inheritable|caps); err != nil {
		return fmt.Errorf("inheritable capabilities: %w", err)
	}
	return nil
}

// capData reads this thread's capability sets.
func capData() (*[2]unix.CapUserData, error) {
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	if err := unix.Capget(hdr, &data[0]); err != nil {
		return nil, err
	}
	return data, nil
}

// inheritableEmpty reports whether this thread's inheritable set is empty.
func inheritableEmpty() bool {
	d, err := capData()
	return err == nil && d[0].Inheritable == 0 && d[1].Inheritable == 0
}

// capsEmpty reports whether every capability set of this thread is empty
// (the ambient set lies within the permitted one).
func capsEmpty() bool {
	d, err := capData()
	if err != nil {
		return false
	}
	for _, c := range d {
		if c.Effective != 0 || c.Permitted != 0 || c.Inheritable != 0 {
			return false
		}
	}
	return true
}

// landlockRules: full write rights under the writable mounts, file writes
// on the terminal and null devices.
func landlockRules(cfg *Config, abi int) []landlockRule {
	var writable []string
	for _, t := range cfg.Tmpfs {
		writable = append(writable, t.Path)
	}
	for _, b := range cfg.Binds {
		if !b.ReadOnly {
			writable = append(writable, b.Target)
		}
	}
	return writeRules(abi, writable)
}

// writeRules: full write rights under each writable directory and /dev/shm,
// file writes on the terminal and null devices.
func writeRules(abi int, writable []string) []landlockRule {
	all, file := writeRights(abi), fileRights(abi)
	var rules []landlockRule
	for _, w := range writable {
		rules = append(rules, landlockRule{w, all})
	}
	rules = append(rules, landlockRule{"/dev/shm", all}, landlockRule{"/dev/pts", file})
	for _, d := range baseline.Devices {
		rules = append(rules, landlockRule{"/dev/" + d, file})
	}
	return rules
}

func execveat(fd int, argv, env []string) error {
	argvp, err := cStrings(argv)
	if err != nil {
		return err
	}
	envp, err := cStrings(env)
	if err != nil {
		return err
	}
	empty, _ := unix.BytePtrFromString("")
	_, _, errno := unix.RawSyscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafePointer(empty)), uintptr(unsafePointer(&argvp[0])), uintptr(unsafePointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	return errno
}

// cStrings is a NULL-terminated array of C strings.
func cStrings(ss []string) ([]*byte, error) {
	out := make([]*byte, 0, len(ss)+1)
	for _, s := range ss {
		p, err := unix.BytePtrFromString(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return append(out, nil), nil
}

// handOverToken moves CORDON_AGENT_TOKEN out of the environment into a pipe
// the agent reads once (CORDON_AGENT_TOKEN_FD), so the token is in no
// environment block inside the sandbox.
func handOverToken(env []string) ([]string, error) {
	var token string
	out := env[:0:0]
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CORDON_AGENT_TOKEN="); ok {
			token = v
			continue
		}
		out = append(out, kv)
	}
	if token == "" {
		return env, nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], 0); err != nil {
		return nil, err
	}
	if _, err := unix.Write(p[1], []byte(token)); err != nil {
		return nil, err
	}
	unix.Close(p[1])
	// p[0] is without close-on-exec, as are stdio and what passOn hands
	// on.
	return append(out, fmt.Sprintf("CORDON_AGENT_TOKEN_FD=%d", p[0])), nil
}

// Hold blocks until standard input closes (see HoldArg).
func Hold() int {
	var b [1]byte
	for {
		if n, err := os.Stdin.Read(b[:]); n == 0 || err != nil {
			return 0
		}
	}
}
