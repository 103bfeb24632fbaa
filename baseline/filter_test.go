//go:build linux

package baseline_test

import (
	"slices"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/baseline"
	"golang.org/x/sys/unix"
)

// vm is the compiled filter for one architecture, interpreted.
type vm struct {
	t    *testing.T
	arch baseline.Arch
	in   *baseline.Interpreter
	size int
}

func newVM(t *testing.T, arch baseline.Arch) *vm {
	t.Helper()
	raw, err := baseline.Seccomp.Compile(arch)
	if err != nil {
		t.Fatal(err)
	}
	in, err := baseline.NewInterpreter(raw)
	if err != nil {
		t.Fatal(err)
	}
	return &vm{t: t, arch: arch, in: in, size: len(raw)}
}

func (v *vm) runArch(audit, nr uint32, args ...uint64) uint32 {
	v.t.Helper()
	got, err := v.in.Decide(audit, nr, args...)
	if err != nil {
		v.t.Fatal(err)
	}
	return got
}

// call is the filter's answer to call name with args.
func (v *vm) call(name string, args ...uint64) uint32 {
	v.t.Helper()
	nr, ok := v.arch.Number(name)
	if !ok {
		v.t.Fatalf("%s has no call %s", v.arch.Name, name)
	}
	return v.runArch(v.arch.Audit, nr, args...)
}

var (
	allow  = uint32(baseline.RetAllow)
	eperm  = baseline.RetErrno(syscall.EPERM)
	enosys = baseline.RetErrno(syscall.ENOSYS)
	eafno  = baseline.RetErrno(syscall.EAFNOSUPPORT)
)

// dockerGated are calls Docker's default profile allows only with a
// capability a sandbox never has, and calls cordon denies beyond it: each
// must be refused.
var dockerGated = []string{
	"acct", "add_key", "bpf", "chroot", "clock_settime", "delete_module", "fanotify_init",
	"finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_mempolicy", "init_module",
	"io_uring_enter", "io_uring_register", "io_uring_setup", "kcmp", "kexec_file_load", "kexec_load",
	"keyctl", "landlock_create_ruleset", "lookup_dcookie", "mbind", "mount", "mount_setattr",
	"move_mount", "move_pages", "name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree",
	"perf_event_open", "pidfd_getfd", "pivot_root", "process_madvise", "process_vm_readv",
	"process_vm_writev", "ptrace", "quotactl", "quotactl_fd", "reboot", "request_key",
	"set_mempolicy", "setdomainname", "sethostname", "setns", "settimeofday", "swapoff", "swapon",
	"syslog", "umount2", "unshare", "userfaultfd", "vhangup", "clock_adjtime",
}

var amd64Gated = []string{"create_module", "get_kernel_syms", "ioperm", "iopl", "query_module", "sysfs", "_sysctl", "uselib", "ustat"}

func TestFilterDecisions(t *testing.T) {
	for _, arch := range baseline.Arches {
		t.Run(arch.Name, func(t *testing.T) {
			v := newVM(t, arch)
			t.Logf("%d instructions", v.size)
			cases := []struct {
				name string
				call string
				args []uint64
				want uint32
			}{
				{"read", "read", nil, allow},
				{"write", "write", nil, allow},
				{"clone3", "clone3", nil, enosys},
				{"clone thread", "clone", []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, allow},
				{"clone newuser", "clone", []uint64{unix.CLONE_NEWUSER}, eperm},
				{"clone newnet", "clone", []uint64{uint64(unix.SIGCHLD) | unix.CLONE_NEWNET}, eperm},
				{"clone newtime", "clone", []uint64{unix.CLONE_NEWTIME}, eperm},
				{"clone newns high bits", "clone", []uint64{1<<32 | unix.CLONE_NEWNS}, eperm},
				{"ioctl tcgets", "ioctl", []uint64{0, unix.TCGETS}, allow},
				{"ioctl tiocsti", "ioctl", []uint64{0, unix.TIOCSTI}, eperm},
				{"ioctl tiocsti high bits", "ioctl", []uint64{0, 1<<32 | unix.TIOCSTI}, eperm},
				{"ioctl tioclinux", "ioctl", []uint64{0, unix.TIOCLINUX}, eperm},
				{"socket inet", "socket", []uint64{unix.AF_INET}, allow},
				{"socket inet6", "socket", []uint64{unix.AF_INET6}, allow},
				{"socket unix", "socket", []uint64{unix.AF_UNIX}, allow},
				{"socket vsock", "socket", []uint64{unix.AF_VSOCK}, eafno},
				{"socket packet", "socket", []uint64{unix.AF_PACKET}, eafno},
				{"socket alg", "socket", []uint64{unix.AF_ALG}, eafno},
				{"socket packet high bits", "socket", []uint64{1<<32 | unix.AF_PACKET}, eafno},
				{"socket netlink route", "socket", []uint64{unix.AF_NETLINK, 0, unix.NETLINK_ROUTE}, allow},
				{"socket netlink audit", "socket", []uint64{unix.AF_NETLINK, 0, unix.NETLINK_AUDIT}, eafno},
				{"personality query", "personality", []uint64{0xffffffff}, allow},
				{"personality linux", "personality", []uint64{0}, allow},
				{"personality addr_no_randomize", "personality", []uint64{0x0040000}, eperm},
				{"openat2", "openat2", nil, enosys},
				{"io_setup", "io_setup", nil, enosys},
				{"fchmod 0755", "fchmod", []uint64{3, 0o755}, allow},
				{"fchmod 4755", "fchmod", []uint64{3, 0o4755}, eperm},
				{"fchmodat 2775", "fchmodat", []uint64{0, 0, 0o2775}, eperm},
				{"fchmodat 1777", "fchmodat", []uint64{0, 0, 0o1777}, allow},
				{"fchmodat2 6755", "fchmodat2", []uint64{0, 0, 0o6755, 0}, eperm},
				{"fchmodat high bits", "fchmodat", []uint64{0, 0, 1<<32 | 0o4755}, eperm},
				{"mknodat regular 4755", "mknodat", []uint64{0, 0, unix.S_IFREG | 0o4755}, eperm},
				{"mknodat fifo", "mknodat", []uint64{0, 0, unix.S_IFIFO | 0o644}, allow},
				{"openat create 0644", "openat", []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o644}, allow},
				{"openat create 4755", "openat", []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o4755}, eperm},
				{"openat tmpfile 2755", "openat", []uint64{0, 0, unix.O_TMPFILE | unix.O_RDWR, 0o2755}, eperm},
				// Without a creating flag the mode is not used: whatever it holds.
				{"openat read, stray mode", "openat", []uint64{0, 0, unix.O_RDONLY, 0o4755}, allow},
			}
			for _, c := range cases {
				if got := v.call(c.call, c.args...); got != c.want {
					t.Errorf("%s: got %#x, want %#x", c.name, got, c.want)
				}
			}
			gated := dockerGated
			if arch.Name == "amd64" {
				gated = append(slices.Clone(gated), amd64Gated...)
			}
			for _, name := range gated {
				if _, ok := arch.Number(name); !ok {
					continue
				}
				if got := v.call(name); got != eperm {
					t.Errorf("%s: got %#x, want EPERM", name, got)
				}
			}
			for _, name := range baseline.Seccomp.Allow {
				if _, ok := arch.Number(name); ok {
					if got := v.call(name, 1<<40, 1<<40, 1<<40); got != allow {
						t.Errorf("%s: got %#x, want it allowed", name, got)
					}
				}
			}
			// Another ABI's calls mean other calls: killed.
			foreign := map[string]uint32{"amd64": 0x40000003, "arm64": 0x40000028}[arch.Name]
			if got := v.runArch(foreign, 0); got != baseline.RetKillProcess {
				t.Errorf("a call of the 32-bit ABI: got %#x, want the process killed", got)
			}
			if arch.X32Bit != 0 {
				if got := v.runArch(arch.Audit, arch.X32Bit|0); got != eperm {
					t.Errorf("an x32 read: got %#x, want EPERM", got)
				}
			}
			// A call newer than the policy answers ENOSYS, as on an older
			// kernel; an older one it does not name, EPERM.
			newest := baseline.Seccomp.Newest(arch)
			if got := v.runArch(arch.Audit, newest+1); got != enosys {
				t.Errorf("call %d, past the newest named (%d): got %#x, want ENOSYS", newest+1, newest, got)
			}
			if got := v.runArch(arch.Audit, 1000); got != enosys {
				t.Errorf("call 1000: got %#x, want ENOSYS", got)
			}
		})
	}
}

// TestFilterDefaultDeny: every call the policy does not name is refused:
// EPERM up to the newest it names, ENOSYS past it.
func TestFilterDefaultDeny(t *testing.T) {
	named := map[string]bool{}
	for _, n := range baseline.Seccomp.Allow {
		named[n] = true
	}
	for _, c := range baseline.Seccomp.Calls {
		named[c.Name] = true
	}
	for _, arch := range baseline.Arches {
		v := newVM(t, arch)
		newest := baseline.Seccomp.Newest(arch)
		refused := 0
		for nr := uint32(0); nr < 1024; nr++ {
			name := ""
			for n := range named {
				if x, ok := arch.Number(n); ok && x == nr {
					name = n
				}
			}
			if name != "" {
				continue
			}
			want := eperm
			if nr > newest {
				want = enosys
			}
			if got := v.runArch(arch.Audit, nr); got != want {
				t.Errorf("%s: unnamed call %d: got %#x, want %#x", arch.Name, nr, got, want)
			}
			refused++
		}
		if refused < 100 {
			t.Errorf("%s: only %d of 1024 call numbers refused", arch.Name, refused)
		}
	}
}

func TestPolicyChecked(t *testing.T) {
	if err := baseline.Seccomp.Check(); err != nil {
		t.Fatal(err)
	}
	twice := baseline.Seccomp.With("read")
	if err := twice.Check(); err == nil {
		t.Fatal("a policy naming read twice passed its check")
	}
	if _, err := (baseline.Arch{Name: "mips"}).Number("read"); err {
		t.Fatal("an architecture without a table knows read")
	}
	if _, err := baseline.Seccomp.Compile(baseline.Arch{Name: "mips"}); err == nil {
		t.Fatal("compiled a filter for an architecture without a table")
	}
}

func TestPolicyWith(t *testing.T) {
	p := baseline.Seccomp.With("landlock_create_ruleset", "ioctl")
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p.Allow, "ioctl") || slices.ContainsFunc(p.Calls, func(c baseline.Call) bool { return c.Name == "ioctl" }) {
		t.Fatal("With(ioctl) left its rules")
	}
}
