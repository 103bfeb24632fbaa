//go:build linux

package sandboxinit

import "golang.org/x/sys/unix"

const (
	auditArch     = 0xc000003e // AUDIT_ARCH_X86_64
	x32SyscallBit = 0x40000000
)

// archDenied are the denied calls only x86-64 has.
var archDenied = []Syscall{
	{"create_module", unix.SYS_CREATE_MODULE}, {"get_kernel_syms", unix.SYS_GET_KERNEL_SYMS},
	{"ioperm", unix.SYS_IOPERM}, {"iopl", unix.SYS_IOPL}, {"query_module", unix.SYS_QUERY_MODULE},
	{"sysfs", unix.SYS_SYSFS}, {"_sysctl", unix.SYS__SYSCTL}, {"uselib", unix.SYS_USELIB},
	{"ustat", unix.SYS_USTAT},
}

// archSetIDCalls are x86-64's legacy calls that give a file its mode.
var archSetIDCalls = []SetIDCall{
	{Syscall{"chmod", unix.SYS_CHMOD}, 1, -1}, {Syscall{"creat", unix.SYS_CREAT}, 1, -1},
	{Syscall{"mknod", unix.SYS_MKNOD}, 1, -1}, {Syscall{"open", unix.SYS_OPEN}, 2, 1},
}
