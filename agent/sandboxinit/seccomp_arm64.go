//go:build linux

package sandboxinit

const (
	auditArch     = 0xc00000b7 // AUDIT_ARCH_AARCH64
	x32SyscallBit = 0          // no second ABI shares arm64's architecture value
)

// archDenied: x86-64's legacy calls (create_module, iopl, ustat, …) do not
// exist on arm64, so it denies none of its own.
var archDenied []Syscall

// archSetIDCalls: arm64 has only the *at forms, which every architecture has.
var archSetIDCalls []SetIDCall
