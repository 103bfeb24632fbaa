//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// run interprets the filter (the subset it uses) for one call.
func evalFilter(t *testing.T, ins []unix.SockFilter, arch uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[0:], nr)
	binary.LittleEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(ins); pc++ {
		in := ins[pc]
		switch in.Code {
		case ldW:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case jeqK, jgeK, jsetK:
			var ok bool
			switch in.Code {
			case jeqK:
				ok = acc == in.K
			case jgeK:
				ok = acc >= in.K
			case jsetK:
				ok = acc&in.K != 0
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case retK:
			return in.K
		default:
			t.Fatalf("unexpected instruction %+v", in)
		}
	}
	t.Fatal("fell off the end of the filter")
	return 0
}

// foreignArch is the architecture value of this machine's other ABI: a
// call made in it must be killed.
var foreignArch uint32 = map[uint32]uint32{
	0xc000003e: 0x40000003, // x86-64: i386 (int 0x80)
	0xc00000b7: 0x40000028, // arm64: 32-bit ARM
}[auditArch]

func TestFilterDecisions(t *testing.T) {
	ins, err := buildFilter()
	if err != nil {
		t.Fatal(err)
	}
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm := errnoRet(unix.EPERM)
	type filterCase struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}
	cases := []filterCase{
		{"read", auditArch, unix.SYS_READ, nil, allow},
		{"32-bit mode", foreignArch, unix.SYS_READ, nil, unix.SECCOMP_RET_KILL_PROCESS},
		{"mount", auditArch, unix.SYS_MOUNT, nil, eperm},
		{"ptrace", auditArch, unix.SYS_PTRACE, nil, eperm},
		{"io_uring", auditArch, unix.SYS_IO_URING_SETUP, nil, eperm},
		{"unshare", auditArch, unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER}, eperm},
		{"clone3", auditArch, unix.SYS_CLONE3, nil, errnoRet(unix.ENOSYS)},
		{"clone thread", auditArch, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, allow},
		{"clone newuser", auditArch, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, eperm},
		{"clone newnet", auditArch, unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD) | unix.CLONE_NEWNET}, eperm},
		{"ioctl tcgets", auditArch, unix.SYS_IOCTL, []uint64{0, unix.TCGETS}, allow},
		{"ioctl tiocsti", auditArch, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI}, eperm},
		{"ioctl tiocsti high bits", auditArch, unix.SYS_IOCTL, []uint64{0, 1<<32 | unix.TIOCSTI}, eperm},
		{"ioctl tioclinux", auditArch, unix.SYS_IOCTL, []uint64{0, unix.TIOCLINUX}, eperm},
		{"socket inet", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_INET}, allow},
		{"socket unix", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_UNIX}, allow},
		{"socket vsock", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK}, errnoRet(unix.EAFNOSUPPORT)},
		{"socket packet", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_PACKET}, errnoRet(unix.EAFNOSUPPORT)},
		{"socket netlink route", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, 0, unix.NETLINK_ROUTE}, allow},
		{"socket netlink audit", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, 0, unix.NETLINK_AUDIT}, errnoRet(unix.EAFNOSUPPORT)},
		{"personality query", auditArch, unix.SYS_PERSONALITY, []uint64{0xffffffff}, allow},
		{"personality linux", auditArch, unix.SYS_PERSONALITY, []uint64{0}, allow},
		{"personality addr_no_randomize", auditArch, unix.SYS_PERSONALITY, []uint64{0x0040000}, eperm},
		{"write", auditArch, unix.SYS_WRITE, nil, allow},
		{"openat2", auditArch, unix.SYS_OPENAT2, nil, errnoRet(unix.ENOSYS)},
		{"fchmod 0755", auditArch, unix.SYS_FCHMOD, []uint64{3, 0o755}, allow},
		{"fchmod 4755", auditArch, unix.SYS_FCHMOD, []uint64{3, 0o4755}, eperm},
		{"fchmodat 2775", auditArch, unix.SYS_FCHMODAT, []uint64{0, 0, 0o2775}, eperm},
		{"fchmodat 1777", auditArch, unix.SYS_FCHMODAT, []uint64{0, 0, 0o1777}, allow},
		{"fchmodat2 6755", auditArch, unix.SYS_FCHMODAT2, []uint64{0, 0, 0o6755, 0}, eperm},
		{"fchmodat high bits", auditArch, unix.SYS_FCHMODAT, []uint64{0, 0, 1<<32 | 0o4755}, eperm},
		{"mknodat regular 4755", auditArch, unix.SYS_MKNODAT, []uint64{0, 0, unix.S_IFREG | 0o4755}, eperm},
		{"mknodat fifo", auditArch, unix.SYS_MKNODAT, []uint64{0, 0, unix.S_IFIFO | 0o644}, allow},
		{"openat create 0644", auditArch, unix.SYS_OPENAT, []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o644}, allow},
		{"openat create 4755", auditArch, unix.SYS_OPENAT, []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o4755}, eperm},
		{"openat tmpfile 2755", auditArch, unix.SYS_OPENAT, []uint64{0, 0, unix.O_TMPFILE | unix.O_RDWR, 0o2755}, eperm},
		// Without a creating flag the mode is not used: whatever it holds.
		{"openat read, stray mode", auditArch, unix.SYS_OPENAT, []uint64{0, 0, unix.O_RDONLY, 0o4755}, allow},
	}
	if x32SyscallBit != 0 {
		cases = append(cases, filterCase{"x32", auditArch, x32SyscallBit | unix.SYS_READ, nil, eperm})
	}
	for _, c := range archSetIDCalls {
		args := make([]uint64, 4)
		if c.Flags >= 0 {
			args[c.Flags] = unix.O_CREAT
		}
		setid := slices.Clone(args)
		setid[c.Mode] = 0o4755
		cases = append(cases, filterCase{c.Name + " 4755", auditArch, uint32(c.Nr), setid, eperm})
		args[c.Mode] = 0o755
		cases = append(cases, filterCase{c.Name + " 0755", auditArch, uint32(c.Nr), args, allow})
	}
	for _, sc := range DeniedSyscalls {
		if got := evalFilter(t, ins, auditArch, uint32(sc.Nr)); got != eperm {
			t.Errorf("%s: got %#x, want EPERM", sc.Name, got)
		}
	}
	for _, c := range cases {
		if got := evalFilter(t, ins, c.arch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: got %#x, want %#x", c.name, got, c.want)
		}
	}
}

// TestContainerOptionsRefusals: a container agent's confinement settings
// are refused when malformed, before any thread is confined; unset or
// "off" asks for none.
func TestContainerOptionsRefusals(t *testing.T) {
	for _, env := range [][]string{
		{EnvLandlock + "=maybe"},
		{EnvLandlock + "=auto", EnvWritable + "=/tmp:relative"},
		{EnvLandlock + "=auto", EnvWritable + "=/tmp/../etc"},
	} {
		if _, err := ContainerOptions(env); err == nil {
			t.Errorf("%q accepted", env)
		}
	}
	for _, env := range [][]string{nil, {EnvLandlock + "=off", EnvWritable + "=/tmp"}} {
		if opts, err := ContainerOptions(env); err != nil || opts.CommandThread != nil {
			t.Errorf("%q: %v, command thread %v", env, err, opts.CommandThread != nil)
		}
	}
}
