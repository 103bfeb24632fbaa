//go:build linux && !amd64 && !arm64

package sandboxinit

// No filter is built here: buildFilter refuses, and so does every sandbox
// that would need it.
const (
	auditArch     = 0
	x32SyscallBit = 0
)

var archDenied []Syscall

var archSetIDCalls []SetIDCall
