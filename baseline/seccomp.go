package baseline

import "syscall"

// The system-call policy: default-deny. A call the policy does not name
// fails with EPERM (ENOSYS above the highest call this build knows, so
// that a program probing a newer kernel's call falls back as it would on
// an older kernel); a named call takes the action of its first rule whose
// conditions all hold, and its Otherwise action when none does.
//
// The allowed calls are Docker's default profile's for a container
// without capabilities, less the kernel surfaces a sandbox never needs:
// io_uring, name_to_handle_at, landlock_create_ruleset, and ptrace and
// process_vm_readv/writev (other processes of the sandbox include its
// agent), and clock_adjtime, which Docker allows for reading the clock's
// state and which no sandbox needs; io_setup answers ENOSYS (below).
// Calls with arguments a filter reads are allowed only with those: clone
// without namespace flags, personality's harmless values, sockets of the
// local and internet families and route netlink only, no set-id bit in a
// mode given to a file, and no terminal injection.
// clone3 and openat2, whose arguments lie in memory a filter cannot read,
// answer ENOSYS, so libc falls back to clone and openat. Calls of another
// architecture (x86-64's int 0x80, x32, arm64's 32-bit mode) are killed.

// Cond holds when the low 32 bits of argument Arg, masked with Mask, equal
// Value. Every argument the policy reads is at most 32 bits wide to the
// kernel (an int, a mode, open's flags, clone's flags), which ignores the
// register's upper half, so a filter must too: comparing 64 bits would let
// a caller pass a value the kernel reads as another.
type Cond struct {
	Arg   int
	Mask  uint32
	Value uint32
}

// Eq is a Cond that argument arg equal v.
func Eq(arg int, v uint32) Cond { return Cond{Arg: arg, Mask: ^uint32(0), Value: v} }

// Clear is a Cond that argument arg have none of bits set.
func Clear(arg int, bits uint32) Cond { return Cond{Arg: arg, Mask: bits, Value: 0} }

// Rule allows its call (Errno 0) or fails it with Errno, when all of Conds
// hold.
type Rule struct {
	Errno syscall.Errno
	Conds []Cond
}

// Call is one system call's rules.
type Call struct {
	Name  string
	Rules []Rule
	// Otherwise is the errno when no rule holds: 0 means EPERM.
	Otherwise syscall.Errno
}

// Policy is a whole filter.
type Policy struct {
	// Allow are calls allowed whatever their arguments.
	Allow []string
	// Calls are the calls with rules, each named once, none in Allow.
	Calls []Call
}

// Linux values the policy names, the same on every architecture it is
// compiled for; declared here so that the package builds everywhere.
const (
	afUnix, afInet, afInet6, afNetlink = 1, 2, 10, 16
	netlinkRoute                       = 0
	// SetIDBits are S_ISUID and S_ISGID: refused in any mode given to a
	// file, so that a sandbox never leaves a set-id program in a
	// directory the host binds in (docs/security.md).
	SetIDBits = 0o4000 | 0o2000
	// CreateFlags are the open flags with which its mode counts: O_CREAT
	// and O_TMPFILE's own bit (without the O_DIRECTORY it includes).
	CreateFlags = 0o100 | 0o20000000
	// NamespaceFlags may not be passed to clone: CLONE_NEWNS, NEWCGROUP,
	// NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME.
	NamespaceFlags = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080
	tiocsti        = 0x5412
	tioclinux      = 0x541c
)

// Personalities are the personality values allowed (Docker's): PER_LINUX,
// with or without the 32-bit address and address-randomisation toggles
// setarch uses, and the query.
var Personalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// SetIDCall names a call that gives a file its mode: Mode is the index of
// its mode argument, Flags that of an open's flags (-1 for none; the mode
// then counts only with CreateFlags).
type SetIDCall struct {
	Name        string
	Mode, Flags int
}

// SetIDCalls are every call that can give a file a set-id bit, the legacy
// forms of x86-64 included.
var SetIDCalls = []SetIDCall{
	{"chmod", 1, -1}, {"fchmod", 1, -1}, {"fchmodat", 2, -1}, {"fchmodat2", 2, -1},
	{"mknod", 1, -1}, {"mknodat", 2, -1}, {"creat", 1, -1},
	{"open", 2, 1}, {"openat", 3, 2},
}

// Seccomp is the baseline's policy.
var Seccomp = Policy{
	Allow: allowed,
	Calls: append([]Call{
		{Name: "clone", Rules: []Rule{{Conds: []Cond{Clear(0, NamespaceFlags)}}}},
		{Name: "clone3", Otherwise: syscall.ENOSYS},
		{Name: "openat2", Otherwise: syscall.ENOSYS},
		// Linux AIO contexts are one pool for the whole host
		// (fs.aio-max-nr, 65536 events by default): one io_setup took it
		// all, and every other process's io_setup failed while the
		// sandbox lived. As on a kernel without AIO, libaio's users fall
		// back to ordinary I/O.
		{Name: "io_setup", Otherwise: syscall.ENOSYS},
		{Name: "ioctl", Rules: []Rule{
			{Errno: syscall.EPERM, Conds: []Cond{Eq(1, tiocsti)}},
			{Errno: syscall.EPERM, Conds: []Cond{Eq(1, tioclinux)}},
			{},
		}},
		{Name: "socket", Otherwise: syscall.EAFNOSUPPORT, Rules: []Rule{
			{Conds: []Cond{Eq(0, afUnix)}}, {Conds: []Cond{Eq(0, afInet)}}, {Conds: []Cond{Eq(0, afInet6)}},
			{Conds: []Cond{Eq(0, afNetlink), Eq(2, netlinkRoute)}},
		}},
		{Name: "personality", Rules: personalityRules()},
	}, setIDRules()...),
}

func personalityRules() []Rule {
	var rs []Rule
	for _, p := range Personalities {
		rs = append(rs, Rule{Conds: []Cond{Eq(0, p)}})
	}
	return rs
}

func setIDRules() []Call {
	var cs []Call
	for _, c := range SetIDCalls {
		rs := []Rule{{Conds: []Cond{Clear(c.Mode, SetIDBits)}}}
		if c.Flags >= 0 {
			rs = append([]Rule{{Conds: []Cond{Clear(c.Flags, CreateFlags)}}}, rs...)
		}
		cs = append(cs, Call{Name: c.Name, Rules: rs})
	}
	return cs
}

// With is p with names allowed too (where p has rules for one, they go).
func (p Policy) With(names ...string) Policy {
	out := Policy{Allow: append(append([]string(nil), p.Allow...), names...)}
	for _, c := range p.Calls {
		keep := true
		for _, n := range names {
			keep = keep && c.Name != n
		}
		if keep {
			out.Calls = append(out.Calls, c)
		}
	}
	return out
}

// allowed are the calls allowed whatever their arguments: Docker's default
// profile's for a container without capabilities (every architecture's
// names; a name an architecture lacks is skipped), less those the policy
// leaves out or gives rules.
var allowed = []string{
	"accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "capget", "capset", "chdir",
	"chown", "chown32", "clock_getres", "clock_getres_time64",
	"clock_gettime", "clock_gettime64", "clock_nanosleep", "clock_nanosleep_time64", "close",
	"close_range", "connect", "copy_file_range", "dup", "dup2", "dup3", "epoll_create",
	"epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2", "epoll_wait",
	"epoll_wait_old", "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat",
	"faccessat2", "fadvise64", "fadvise64_64", "fallocate", "fanotify_mark", "fchdir", "fchown",
	"fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock",
	"fork", "fremovexattr", "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64",
	"fsync", "ftruncate", "ftruncate64", "futex", "futex_time64", "futex_waitv", "futimesat",
	"getcpu", "getcwd", "getdents", "getdents64", "getegid", "getegid32", "geteuid", "geteuid32",
	"getgid", "getgid32", "getgroups", "getgroups32", "getitimer", "getpeername", "getpgid",
	"getpgrp", "getpid", "getppid", "getpriority", "getrandom", "getresgid", "getresgid32",
	"getresuid", "getresuid32", "getrlimit", "get_robust_list", "getrusage", "getsid",
	"getsockname", "getsockopt", "get_thread_area", "gettid", "gettimeofday", "getuid", "getuid32",
	"getxattr", "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch",
	"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
	"ioprio_get", "ioprio_set", "io_submit", "ipc", "kill", "landlock_add_rule",
	"landlock_restrict_self", "lchown", "lchown32", "lgetxattr", "link", "linkat", "listen",
	"listxattr", "llistxattr", "_llseek", "lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64",
	"madvise", "membarrier", "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat",
	"mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mq_getsetattr", "mq_notify",
	"mq_open", "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64",
	"mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock",
	"munlockall", "munmap", "nanosleep", "newfstatat", "_newselect", "pause", "pidfd_open",
	"pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll",
	"ppoll", "ppoll_time64", "prctl", "pread64", "preadv", "preadv2", "prlimit64",
	"process_mrelease", "pselect6", "pselect6_time64", "pwrite64", "pwritev", "pwritev2", "read",
	"readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom", "recvmmsg",
	"recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr", "rename", "renameat",
	"renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending",
	"rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
	"rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_get_priority_max", "sched_get_priority_min", "sched_getscheduler",
	"sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr",
	"sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select", "semctl", "semget",
	"semop", "semtimedop", "semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg",
	"sendmsg", "sendto", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32",
	"setgroups", "setgroups32", "setitimer", "setpgid", "setpriority", "setregid", "setregid32",
	"setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32", "setrlimit",
	"set_robust_list", "setsid", "setsockopt", "set_thread_area", "set_tid_address", "setuid",
	"setuid32", "setxattr", "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack",
	"signalfd", "signalfd4", "sigprocmask", "sigreturn", "socketcall", "socketpair", "splice",
	"stat", "stat64", "statfs", "statfs64", "statx", "symlink", "symlinkat", "sync",
	"sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create",
	"timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime",
	"timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64",
	"timerfd_settime", "timerfd_settime64", "times", "tkill", "truncate", "truncate64",
	"ugetrlimit", "umask", "uname", "unlink", "unlinkat", "utime", "utimensat", "utimensat_time64",
	"utimes", "vfork", "vmsplice", "wait4", "waitid", "waitpid", "write", "writev",
	// Docker's, for one architecture.
	"arch_prctl", "modify_ldt", "sync_file_range2", "set_tls", "cacheflush",
}
