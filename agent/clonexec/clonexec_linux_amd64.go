package clonexec

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// child is all the child reads or writes. It is on the heap, which the
// garbage collector neither moves nor frees while Start holds it.
type child struct {
	steps  []step
	names  []string
	stack  [4096]byte
	buf    [1]byte
	dfl    [4]uintptr // a struct sigaction asking for the default action
	mask   uint64     // the starting thread's signal mask, restored before the exec
	nofile unix.Rlimit
	pidfd  int32
	keep   []any // the strings the steps point into
}

// newChild allocates a child on the heap. It must not be inlined: the
// compiler would then see that nothing keeps the child, put it on the
// goroutine's stack, and the stack may move (grow) while the child,
// sharing this memory, still reads and writes it.
//
//go:noinline
func newChild() *child { return new(child) }

func (c *child) add(name string, s step) {
	c.steps = append(c.steps, s)
	c.names = append(c.names, name)
}

// Available is true: the child's steps exist for this platform.
const Available = true

const sysCloseRange, sysExitGroup = unix.SYS_CLOSE_RANGE, unix.SYS_EXIT_GROUP

// namespaceFlags are the clone flags Start passes on.
const namespaceFlags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
	syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP

// Supported reports whether Start can start a process with sys: whether
// sys asks only for what Start does (new namespaces, ID maps, credentials,
// a session, a parent-death signal).
func Supported(sys *syscall.SysProcAttr) bool {
	return sys != nil && sys.Cloneflags&^namespaceFlags == 0 && sys.Unshareflags == 0 &&
		sys.Chroot == "" && !sys.Ptrace && !sys.Setpgid && sys.Pgid == 0 &&
		!sys.Setctty && !sys.Noctty && sys.Ctty == 0 && !sys.Foreground &&
		sys.AmbientCaps == nil && !sys.UseCgroupFD && sys.CgroupFD == 0 && sys.PidFD == nil
}

// Start starts path as syscall.ForkExec(path, argv, &syscall.ProcAttr{Dir:
// dir, Env: env, Files: files, Sys: sys}) does, for the sys that Supported
// accepts, and returns the process's pid and a pidfd for it. files[i]
// becomes descriptor i. nofile, when not nil, is the RLIMIT_NOFILE this
// process started with (see OriginalNofile): the child gets it back, as
// syscall.ForkExec gives it back, when the Go runtime's raise of the soft
// limit is still in place. helper, when not nil, is started by the child
// just before its exec (see Helper).
func Start(path string, argv, env []string, dir string, files []int, sys *syscall.SysProcAttr, nofile *unix.Rlimit, helper *Helper) (pid, pidfd int, err error) {
	pathp, err := syscall.BytePtrFromString(path)
	if err != nil {
		return 0, -1, err
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return 0, -1, err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return 0, -1, err
	}
	c := newChild()
	c.keep = append(c.keep, pathp, argvp, envp)
	exec := step{nr: unix.SYS_EXECVE, a1: uintptr(unsafe.Pointer(pathp)), a2: uintptr(unsafe.Pointer(&argvp[0])), a3: uintptr(unsafe.Pointer(&envp[0])), check: checkErrno}
	if helper != nil {
		// The helper may change what paths name as soon as it starts (the
		// process tier's enters the root it built, and moves the child
		// with it): the program is found before, here, and the child
		// executes it by descriptor (one above those it places).
		o, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, -1, &StepError{Step: "execve", Err: err}
		}
		fd, err := unix.FcntlInt(uintptr(o), unix.F_DUPFD_CLOEXEC, len(files))
		unix.Close(o)
		if err != nil {
			return 0, -1, err
		}
		defer unix.Close(fd)
		empty := new(byte)
		c.keep = append(c.keep, empty)
		exec = step{nr: unix.SYS_EXECVEAT, a1: uintptr(fd), a2: uintptr(unsafe.Pointer(empty)), a3: exec.a2, a4: exec.a3, a5: unix.AT_EMPTY_PATH, check: checkErrno}
	}
	return start(c, exec, dir, files, sys, nofile, helper)
}

// Check makes what Start would for sys (the namespaces, the ID maps, the
// credentials and the rest) in a child that then exits instead of
// executing anything, and reports whether all of it worked: a probe of
// whether this host allows such processes.
func Check(sys *syscall.SysProcAttr) error {
	pid, pidfd, err := start(newChild(), step{nr: unix.SYS_EXIT_GROUP}, "", nil, sys, nil, nil)
	if err != nil {
		return err
	}
	unix.Close(pidfd)
	var ws unix.WaitStatus
	for {
		if _, err = unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
			break
		}
	}
	if err == nil && !(ws.Exited() && ws.ExitStatus() == 0) {
		err = fmt.Errorf("clonexec: the checking child ended with %v", ws)
	}
	return err
}

// start runs the child's steps, last, which is the exec (or the exit of
// Check's child).
func start(c *child, last step, dir string, files []int, sys *syscall.SysProcAttr, nofile *unix.Rlimit, helper *Helper) (pid, pidfd int, err error) {
	if !Supported(sys) {
		return 0, -1, errors.New("clonexec: process attributes beyond what it supports")
	}
	if helper != nil && (sys.Cloneflags&syscall.CLONE_NEWPID == 0 || helper.started) {
		// In its own PID namespace the child is its helper's reaper, and
		// the helper cannot outlive it: the namespace ends with the child.
		return 0, -1, errors.New("clonexec: a helper needs a new PID namespace, and starts once")
	}

	// Every descriptor of the parent's that the child uses sits above the
	// targets 0..n-1: placing one never overwrites another.
	n := len(files)
	var opened []int
	defer func() {
		for _, fd := range opened {
			unix.Close(fd)
		}
	}()
	above := func(fd int) (int, error) {
		h, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, n)
		if err == nil {
			opened = append(opened, h)
		}
		return h, err
	}
	pipe := func() (r, w int, err error) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return -1, -1, err
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		if r, err = above(p[0]); err == nil {
			w, err = above(p[1])
		}
		return r, w, err
	}
	sources := make([]int, n)
	for i, fd := range files {
		if sources[i], err = above(fd); err != nil {
			return 0, -1, fmt.Errorf("clonexec: descriptor %d: %w", fd, err)
		}
	}
	// The status pipe's write end is the child's alone once the parent's
	// copy is closed after the clone; the exec closes it. The end of file
	// on statusR says the child has exec'd or exited.
	statusR, _, err := pipe()
	if err != nil {
		return 0, -1, err
	}
	syncR, syncW := -1, -1
	maps := sys.UidMappings != nil || sys.GidMappings != nil
	if maps {
		if syncR, syncW, err = pipe(); err != nil {
			return 0, -1, err
		}
		// The child's copy of the write end goes first: a parent that
		// fails, or dies, before writing must leave the child an end of file.
		c.add("close the sync pipe's write end", step{nr: unix.SYS_CLOSE, a1: uintptr(syncW), check: checkErrno})
		c.add("wait for the ID maps", step{nr: unix.SYS_READ, a1: uintptr(syncR), a2: uintptr(unsafe.Pointer(&c.buf[0])), a3: 1, check: checkWant, want: 1})
	}
	if sys.Setsid {
		c.add("setsid", step{nr: unix.SYS_SETSID, check: checkErrno})
	}
	if cred := sys.Credential; cred != nil {
		// As syscall.ForkExec: groups are set unless asked not to, or
		// unless setgroups is denied and there are none to set.
		if !cred.NoSetGroups && !(sys.GidMappings != nil && !sys.GidMappingsEnableSetgroups && len(cred.Groups) == 0) {
			s := step{nr: unix.SYS_SETGROUPS, a1: uintptr(len(cred.Groups)), check: checkErrno}
			if len(cred.Groups) > 0 {
				groups := make([]uint32, len(cred.Groups)) // on the heap: its size is not constant
				copy(groups, cred.Groups)
				c.keep = append(c.keep, groups)
				s.a2 = uintptr(unsafe.Pointer(&groups[0]))
			}
			c.add("setgroups", s)
		}
		c.add("setgid", step{nr: unix.SYS_SETGID, a1: uintptr(cred.Gid), check: checkErrno})
		c.add("setuid", step{nr: unix.SYS_SETUID, a1: uintptr(cred.Uid), check: checkErrno})
	}
	if dir != "" {
		dirp, err := syscall.BytePtrFromString(dir)
		if err != nil {
			return 0, -1, err
		}
		c.keep = append(c.keep, dirp)
		c.add("chdir", step{nr: unix.SYS_CHDIR, a1: uintptr(unsafe.Pointer(dirp)), check: checkErrno})
	}
	if sys.Pdeathsig != 0 {
		c.add("set the parent-death signal", step{nr: unix.SYS_PRCTL, a1: unix.PR_SET_PDEATHSIG, a2: uintptr(sys.Pdeathsig), check: checkErrno})
		// A parent that died before the signal was set is noticed: the
		// child ends. (In a new PID namespace the parent is outside it
		// and getppid says 0; the parent is alive, waiting for the exec.)
		if sys.Cloneflags&syscall.CLONE_NEWPID == 0 {
			c.add("check the parent", step{nr: unix.SYS_GETPPID, check: checkWant, want: uintptr(unix.Getpid())})
		}
	}
	for i, fd := range sources {
		c.add("place descriptor "+strconv.Itoa(i), step{nr: unix.SYS_DUP3, a1: uintptr(fd), a2: uintptr(i), check: checkErrno})
	}
	spawn := -1
	if helper != nil {
		// With the child's credentials and namespaces and its descriptors
		// placed (and only those: the rest are the parent's), before the
		// signal dispositions change: it runs with every signal blocked.
		// Its calls are given to the child (setHelper) before the child
		// reads them, after its wait for the ID maps; without maps to
		// wait for, now.
		spawn = len(c.steps)
		c.add("start the helper", step{nr: unix.SYS_CLONE, a1: unix.CLONE_VM | uintptr(unix.SIGCHLD),
			a2: uintptr(unsafe.Pointer(&helper.stack[len(helper.stack)-8])) &^ 15, check: checkSpawn})
		helper.started = true
		if !maps {
			c.setHelper(spawn, helper, n)
		}
	}
	if nofile != nil && nofile.Cur < nofile.Max-1 {
		var cur unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &cur) == nil && cur.Cur == nofile.Max-1 && cur.Max == nofile.Max {
			c.nofile = *nofile
			c.add("restore RLIMIT_NOFILE", step{nr: unix.SYS_PRLIMIT64, a2: unix.RLIMIT_NOFILE, a3: uintptr(unsafe.Pointer(&c.nofile)), check: checkErrno})
		}
	}
	// The signals this process catches get their default action back
	// before the mask is lifted: a signal that reached the child before its
	// exec must not run this process's handlers on its memory.
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		var act [4]uintptr
		_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&act)), 8, 0, 0)
		if e == 0 && act[0] != 0 && act[0] != 1 { // neither SIG_DFL nor SIG_IGN
			c.add("reset signal "+strconv.Itoa(sig), step{nr: unix.SYS_RT_SIGACTION, a1: uintptr(sig), a2: uintptr(unsafe.Pointer(&c.dfl)), a4: 8, check: checkErrno})
		}
	}
	c.add("restore the signal mask", step{nr: unix.SYS_RT_SIGPROCMASK, a1: unix.SIG_SETMASK, a2: uintptr(unsafe.Pointer(&c.mask)), a4: 8, check: checkErrno})
	name := "execve"
	if last.nr == unix.SYS_EXIT_GROUP {
		name = "exit"
	}
	c.add(name, last)

	sp := uintptr(unsafe.Pointer(&c.stack[len(c.stack)-64])) &^ 15
	flags := uintptr(sys.Cloneflags) | unix.CLONE_VM | unix.CLONE_PIDFD | uintptr(unix.SIGCHLD)
	c.pidfd = -1
	// The child starts with every signal blocked (it inherits this
	// thread's mask), so none runs this process's handlers before they
	// are reset. Descriptors made meanwhile without close-on-exec wait
	// for ForkLock, as for syscall.ForkExec.
	all := ^uint64(0)
	syscall.ForkLock.Lock()
	runtime.LockOSThread()
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&c.mask)), 8, 0, 0)
	var r, errno uintptr
	if e != 0 {
		errno = uintptr(e)
	} else if restore, e := ownNamespace(sys); e != 0 {
		errno = uintptr(e)
		unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&c.mask)), 0, 8, 0, 0)
	} else {
		r, errno = cloneRun(flags, sp, uintptr(unsafe.Pointer(&c.pidfd)), unsafe.Pointer(&c.steps[0]), uintptr(len(c.steps)))
		restore()
		unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&c.mask)), 0, 8, 0, 0)
	}
	runtime.UnlockOSThread()
	syscall.ForkLock.Unlock()
	if errno != 0 {
		return 0, -1, &StepError{Step: "clone", Err: syscall.Errno(errno)}
	}
	pid, pidfd = int(r), int(c.pidfd)

	// The child holds its own copies of what it needs; these go now, so
	// that the status pipe reaches its end of file when the child's does.
	for _, fd := range opened {
		if fd != statusR && fd != syncW {
			unix.Close(fd)
		}
	}
	opened = []int{statusR}
	var mapErr error
	if maps {
		if mapErr = writeIDMaps(pid, sys); mapErr == nil {
			if spawn >= 0 {
				c.setHelper(spawn, helper, n)
			}
			_, mapErr = unix.Write(syncW, []byte{1})
		}
		// On an error the child reads an end of file instead, and exits.
		unix.Close(syncW)
	}
	if helper != nil && helper.Cloned != nil && mapErr == nil {
		helper.Cloned(pid)
	}
	var b [64]byte
	for {
		if _, err := unix.Read(statusR, b[:]); err != unix.EINTR {
			break
		}
	}
	runtime.KeepAlive(c)
	failed := mapErr
	for i, s := range c.steps {
		if failed != nil {
			break
		}
		if s.failed != 0 {
			var e error = syscall.Errno(-int64(s.result))
			if s.check == checkWant {
				e = fmt.Errorf("got %d, want %d", int64(s.result), s.want)
			}
			failed = &StepError{Step: c.names[i], Err: e}
		}
	}
	if failed != nil {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil) // reaped here unless the caller's reaper came first
		unix.Close(pidfd)
		return 0, -1, failed
	}
	if spawn >= 0 && c.steps[spawn].nr == unix.SYS_CLONE {
		helper.pid = int(c.steps[spawn].result)
	}
	return pid, pidfd, nil
}

// setHelper completes step i, the helper's start, with the helper's calls
// (Fill's, when it has one), the child having placed n descriptors; with
// no calls after all, the step starts nothing.
func (c *child) setHelper(i int, h *Helper, n int) {
	if h.Fill != nil && !h.Fill() {
		c.steps[i] = step{nr: unix.SYS_GETPID, check: checkNone}
		return
	}
	h.finish(n)
	c.steps[i].a6, c.steps[i].want = uintptr(len(h.steps)), uintptr(unsafe.Pointer(&h.steps[0]))
}

func cloneRun(flags, stack, ptid uintptr, prog unsafe.Pointer, n uintptr) (pid, errno uintptr)

// writeIDMaps writes the child's user namespace ID maps, as
// syscall.ForkExec's parent does.
func writeIDMaps(pid int, sys *syscall.SysProcAttr) error {
	proc := "/proc/" + strconv.Itoa(pid) + "/"
	write := func(name string, data []byte) error {
		fd, err := unix.Open(proc+name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		_, err = unix.Write(fd, data)
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("clonexec: write %s: %w", name, err)
		}
		return nil
	}
	if sys.UidMappings != nil {
		if err := write("uid_map", formatIDMap(sys.UidMappings)); err != nil {
			return err
		}
	}
	if sys.GidMappings != nil {
		setgroups := []byte("deny")
		if sys.GidMappingsEnableSetgroups {
			setgroups = []byte("allow")
		}
		if err := write("setgroups", setgroups); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		if err := write("gid_map", formatIDMap(sys.GidMappings)); err != nil {
			return err
		}
	}
	return nil
}

func formatIDMap(m []syscall.SysProcIDMap) []byte {
	var b []byte
	for _, e := range m {
		b = strconv.AppendInt(b, int64(e.ContainerID), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(e.HostID), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(e.Size), 10)
		b = append(b, '\n')
	}
	return b
}

// ownNamespace makes the calling thread's effective uid, for the clone
// alone, the host id that sys maps the new user namespace's root to, so
// that the namespace is that id's and not this process's (root's): the
// kernel charges what a namespace's users hold of the per-user limits
// (inotify instances and watches, tasks counted against RLIMIT_NPROC...)
// to the namespace's owner in the parent namespace too. Owned by root,
// every sandbox shared root's: one sandbox's 128 inotify instances left
// the host's root processes, and every other sandbox, unable to make one.
// The thread keeps its capabilities across the change
// (SECBIT_NO_SETUID_FIXUP), which creating the namespaces needs where
// the host restricts unprivileged user namespaces. restore puts back the
// thread's uid and securebits; it must run on the same locked thread.
// Where there is nothing to change (no new user namespace, no root in
// its maps, this process not root), or where this process may not change
// its securebits (no CAP_SETPCAP), it does nothing, and the namespace is
// root's as before.
func ownNamespace(sys *syscall.SysProcAttr) (restore func(), errno syscall.Errno) {
	owner := -1
	if sys.Cloneflags&syscall.CLONE_NEWUSER != 0 {
		for _, m := range sys.UidMappings {
			if m.ContainerID == 0 && m.HostID > 0 {
				owner = m.HostID
			}
		}
	}
	if owner < 0 || unix.Geteuid() != 0 {
		return func() {}, 0
	}
	const secbitNoSetuidFixup = 1 << 2
	bits, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_SECUREBITS, 0, 0)
	if e != 0 {
		return nil, e
	}
	if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits|secbitNoSetuidFixup, 0); e == unix.EPERM {
		return func() {}, 0
	} else if e != 0 {
		return nil, e
	}
	keep := ^uintptr(0) // -1: unchanged
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(owner), keep); e != 0 {
		unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0)
		return nil, e
	}
	return func() {
		unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep)
		unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0)
	}, 0
}
