//go:build linux

package sandboxinit

import (
	"encoding/binary"
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

func TestFilterDecisions(t *testing.T) {
	ins, err := buildFilter()
	if err != nil {
		t.Fatal(err)
	}
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm := errnoRet(unix.EPERM)
	cases := []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"read", auditArchX86_64, unix.SYS_READ, nil, allow},
		{"i386", 0x40000003, unix.SYS_READ, nil, unix.SECCOMP_RET_KILL_PROCESS},
		{"x32", auditArchX86_64, x32SyscallBit | unix.SYS_READ, nil, eperm},
		{"mount", auditArchX86_64, unix.SYS_MOUNT, nil, eperm},
		{"ptrace", auditArchX86_64, unix.SYS_PTRACE, nil, eperm},
		{"io_uring", auditArchX86_64, unix.SYS_IO_URING_SETUP, nil, eperm},
		{"unshare", auditArchX86_64, unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER}, eperm},
		{"clone3", auditArchX86_64, unix.SYS_CLONE3, nil, errnoRet(unix.ENOSYS)},
		{"clone thread", auditArchX86_64, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, allow},
		{"clone newuser", auditArchX86_64, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, eperm},
		{"clone newnet", auditArchX86_64, unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD) | unix.CLONE_NEWNET}, eperm},
		{"ioctl tcgets", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, unix.TCGETS}, allow},
		{"ioctl tiocsti", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI}, eperm},
		{"ioctl tiocsti high bits", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, 1<<32 | unix.TIOCSTI}, eperm},
		{"ioctl tioclinux", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCLINUX}, eperm},
		{"socket inet", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET}, allow},
		{"socket unix", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_UNIX}, allow},
		{"socket vsock", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK}, errnoRet(unix.EAFNOSUPPORT)},
		{"socket packet", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_PACKET}, errnoRet(unix.EAFNOSUPPORT)},
		{"socket netlink route", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, 0, unix.NETLINK_ROUTE}, allow},
		{"socket netlink audit", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, 0, unix.NETLINK_AUDIT}, errnoRet(unix.EAFNOSUPPORT)},
		{"personality query", auditArchX86_64, unix.SYS_PERSONALITY, []uint64{0xffffffff}, allow},
		{"personality linux", auditArchX86_64, unix.SYS_PERSONALITY, []uint64{0}, allow},
		{"personality addr_no_randomize", auditArchX86_64, unix.SYS_PERSONALITY, []uint64{0x0040000}, eperm},
		{"write", auditArchX86_64, unix.SYS_WRITE, nil, allow},
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
