package sandboxinit

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter every sandboxed process runs under: Docker's default
// profile's denials, plus the kernel surfaces a sandbox never needs (io_uring,
// bpf, keyrings, userfaultfd, perf, namespace and mount manipulation,
// ptrace-like access to other processes), terminal injection, and socket
// families that reach past the network namespace. A denied call fails with
// EPERM; clone3 answers ENOSYS so that libc falls back to clone, whose flags
// a classic BPF filter can inspect.

// Syscall names a system call for runtimes that take names (an OCI
// bundle's seccomp section) and numbers it for the filter built here.
type Syscall struct {
	Name string
	Nr   uintptr
}

// DeniedSyscalls fail with EPERM, on every tier that can express it: the
// calls every architecture has, then this architecture's own (archDenied).
var DeniedSyscalls = append([]Syscall{
	{"acct", unix.SYS_ACCT}, {"add_key", unix.SYS_ADD_KEY}, {"bpf", unix.SYS_BPF},
	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME}, {"clock_settime", unix.SYS_CLOCK_SETTIME},
	{"delete_module", unix.SYS_DELETE_MODULE}, {"finit_module", unix.SYS_FINIT_MODULE},
	{"get_mempolicy", unix.SYS_GET_MEMPOLICY}, {"init_module", unix.SYS_INIT_MODULE},
	{"kcmp", unix.SYS_KCMP}, {"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD}, {"kexec_load", unix.SYS_KEXEC_LOAD},
	{"keyctl", unix.SYS_KEYCTL}, {"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE}, {"mbind", unix.SYS_MBIND},
	{"mount", unix.SYS_MOUNT}, {"move_pages", unix.SYS_MOVE_PAGES},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT}, {"nfsservctl", unix.SYS_NFSSERVCTL},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT}, {"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"pivot_root", unix.SYS_PIVOT_ROOT}, {"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV}, {"ptrace", unix.SYS_PTRACE},
	{"quotactl", unix.SYS_QUOTACTL}, {"reboot", unix.SYS_REBOOT},
	{"request_key", unix.SYS_REQUEST_KEY}, {"set_mempolicy", unix.SYS_SET_MEMPOLICY}, {"setns", unix.SYS_SETNS},
	{"settimeofday", unix.SYS_SETTIMEOFDAY}, {"swapon", unix.SYS_SWAPON}, {"swapoff", unix.SYS_SWAPOFF},
	{"umount2", unix.SYS_UMOUNT2},
	{"unshare", unix.SYS_UNSHARE}, {"userfaultfd", unix.SYS_USERFAULTFD},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER}, {"io_uring_register", unix.SYS_IO_URING_REGISTER},
	{"open_tree", unix.SYS_OPEN_TREE}, {"move_mount", unix.SYS_MOVE_MOUNT}, {"fsopen", unix.SYS_FSOPEN},
	{"fsconfig", unix.SYS_FSCONFIG}, {"fsmount", unix.SYS_FSMOUNT}, {"fspick", unix.SYS_FSPICK},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR}, {"syslog", unix.SYS_SYSLOG}, {"chroot", unix.SYS_CHROOT},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD}, {"vhangup", unix.SYS_VHANGUP},
	{"landlock_create_ruleset", unix.SYS_LANDLOCK_CREATE_RULESET}, {"fanotify_init", unix.SYS_FANOTIFY_INIT},
	{"process_madvise", unix.SYS_PROCESS_MADVISE},
}, archDenied...)

// SetIDCall is a call that gives a file its mode: Mode is the index of its
// mode argument and Flags, for an open, that of its flags (-1 for none),
// the mode counting only when they create a file (O_CREAT, O_TMPFILE). A
// set-user-ID or set-group-ID bit in such a mode is refused (EPERM): a
// sandbox that could make a set-id program in a directory the host binds
// in would leave one there for the host's users to run (docs/security.md).
type SetIDCall struct {
	Syscall
	Mode, Flags int
}

// SetIDCalls are every call that can give a file a set-id bit: the chmod
// family, creating opens and mknod, this architecture's legacy forms
// included (archSetIDCalls). openat2, whose mode lies in memory a filter
// cannot read, answers ENOSYS (OpenHowCall), as on kernels before 5.6, so
// that its callers fall back to openat.
var SetIDCalls = append([]SetIDCall{
	{Syscall{"fchmod", unix.SYS_FCHMOD}, 1, -1}, {Syscall{"fchmodat", unix.SYS_FCHMODAT}, 2, -1},
	{Syscall{"fchmodat2", unix.SYS_FCHMODAT2}, 2, -1}, {Syscall{"mknodat", unix.SYS_MKNODAT}, 2, -1},
	{Syscall{"openat", unix.SYS_OPENAT}, 3, 2},
}, archSetIDCalls...)

// OpenHowCall is openat2, answered ENOSYS (see SetIDCalls).
var OpenHowCall = Syscall{"openat2", unix.SYS_OPENAT2}

// SetIDBits are the mode bits SetIDCalls refuse.
const SetIDBits = unix.S_ISUID | unix.S_ISGID

// CreateFlags are the open flags with which an open's mode counts
// (O_TMPFILE's own bit, without the O_DIRECTORY it includes).
const CreateFlags = unix.O_CREAT | unix.O_TMPFILE&^unix.O_DIRECTORY

// NamespaceFlags may not be passed to clone.
const NamespaceFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// AllowedPersonalities are the personality values Docker allows (linux, and the 32-bit and address
// randomisation toggles tools like setarch use); everything else is denied.
var AllowedPersonalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

const (
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArgs = 16 // args[i] at 16 + 8*i; the low 32 bits come first on little-endian
)

type prog struct{ ins []unix.SockFilter }

func (p *prog) stmt(code uint16, k uint32) { p.ins = append(p.ins, unix.SockFilter{Code: code, K: k}) }
func (p *prog) jump(code uint16, k uint32, jt, jf uint8) {
	p.ins = append(p.ins, unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf})
}

const (
	ldW   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeqK  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jgeK  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	jsetK = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	retK  = unix.BPF_RET | unix.BPF_K
)

func errnoRet(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

// buildFilter assembles the filter for this architecture (auditArch).
func buildFilter() ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no seccomp filter is built for %s (only amd64 and arm64)", runtime.GOARCH)
	}
	p := &prog{}
	// A call of another architecture (x86-64's int 0x80, arm64's 32-bit
	// mode) is killed outright: its numbers mean other calls.
	p.stmt(ldW, seccompDataArch)
	p.jump(jeqK, auditArch, 1, 0)
	p.stmt(retK, unix.SECCOMP_RET_KILL_PROCESS)
	p.stmt(ldW, seccompDataNr)
	if x32SyscallBit != 0 {
		// x32 calls share x86-64's architecture value, numbered above this bit.
		p.jump(jgeK, x32SyscallBit, 0, 1)
		p.stmt(retK, errnoRet(unix.EPERM))
	}

	// Plain denials.
	for _, sc := range DeniedSyscalls {
		p.jump(jeqK, uint32(sc.Nr), 0, 1)
		p.stmt(retK, errnoRet(unix.EPERM))
	}
	// clone3's flags live in memory a filter cannot read: answer ENOSYS;
	// likewise openat2's mode.
	for _, nr := range []uintptr{unix.SYS_CLONE3, OpenHowCall.Nr} {
		p.jump(jeqK, uint32(nr), 0, 1)
		p.stmt(retK, errnoRet(unix.ENOSYS))
	}

	// No set-id bit in a mode given to a file.
	for _, c := range SetIDCalls {
		p.setIDCheck(c)
	}

	// clone: no new namespaces (flags are args[0]).
	p.jump(jeqK, unix.SYS_CLONE, 0, 4)
	p.stmt(ldW, seccompDataArgs)
	p.jump(jsetK, NamespaceFlags, 0, 1)
	p.stmt(retK, errnoRet(unix.EPERM))
	p.stmt(retK, unix.SECCOMP_RET_ALLOW)

	// ioctl: no terminal injection; compare the low 32 bits of the request
	// only, so high bits set to dodge the check do not help.
	p.jump(jeqK, unix.SYS_IOCTL, 0, 5)
	p.stmt(ldW, seccompDataArgs+8)
	p.jump(jeqK, unix.TIOCSTI, 2, 0)
	p.jump(jeqK, unix.TIOCLINUX, 1, 0)
	p.stmt(retK, unix.SECCOMP_RET_ALLOW)
	p.stmt(retK, errnoRet(unix.EPERM))

	// socket: no AF_VSOCK, AF_PACKET, or AF_NETLINK other than route.
	p.jump(jeqK, unix.SYS_SOCKET, 0, 8)
	p.stmt(ldW, seccompDataArgs)
	p.jump(jeqK, unix.AF_VSOCK, 5, 0)
	p.jump(jeqK, unix.AF_PACKET, 4, 0)
	p.jump(jeqK, unix.AF_NETLINK, 0, 2)
	p.stmt(ldW, seccompDataArgs+16)
	p.jump(jeqK, unix.NETLINK_ROUTE, 0, 1)
	p.stmt(retK, unix.SECCOMP_RET_ALLOW)
	p.stmt(retK, errnoRet(unix.EAFNOSUPPORT))

	// personality: only the harmless values.
	n := len(AllowedPersonalities)
	p.jump(jeqK, unix.SYS_PERSONALITY, 0, uint8(n+3))
	p.stmt(ldW, seccompDataArgs)
	for i, v := range AllowedPersonalities {
		p.jump(jeqK, v, uint8(n-i), 0)
	}
	p.stmt(retK, errnoRet(unix.EPERM))
	p.stmt(retK, unix.SECCOMP_RET_ALLOW)

	p.stmt(retK, unix.SECCOMP_RET_ALLOW)
	return p.ins, nil
}

// setIDCheck refuses c with a set-id bit in its mode (and, for an open, a
// flag that creates): the block answers every call of c's number itself.
func (p *prog) setIDCheck(c SetIDCall) {
	n := uint8(4)
	if c.Flags >= 0 {
		n += 2
	}
	p.jump(jeqK, uint32(c.Nr), 0, n)
	if c.Flags >= 0 {
		p.stmt(ldW, seccompDataArgs+8*uint32(c.Flags))
		p.jump(jsetK, CreateFlags, 0, 3) // not creating: allow
	}
	p.stmt(ldW, seccompDataArgs+8*uint32(c.Mode))
	p.jump(jsetK, SetIDBits, 0, 1)
	p.stmt(retK, errnoRet(unix.EPERM))
	p.stmt(retK, unix.SECCOMP_RET_ALLOW)
}

// installSeccomp loads the filter on every thread (allThreads), or on the
// calling thread alone when that thread then execs: either way, everything
// the sandbox ever runs inherits it.
func installSeccomp(allThreads bool) error {
	ins, err := buildFilter()
	if err != nil {
		return err
	}
	var flags uintptr
	if allThreads {
		flags = unix.SECCOMP_FILTER_FLAG_TSYNC
	}
	fprog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return errno
	}
	if r != 0 {
		return fmt.Errorf("thread %d could not take the filter", r)
	}
	return nil
}
