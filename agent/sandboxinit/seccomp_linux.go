package sandboxinit

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cordon-sandbox/cordon/baseline"
	"golang.org/x/sys/unix"
)

//go:generate go run gen_filter.go

// buildFilter is the baseline's system-call policy (baseline.Seccomp:
// default-deny) for this architecture, compiled when this program was
// built (filter_linux_ARCH.go): compiling its thousand instructions at
// every sandbox's start cost 0.15 ms of it.
func buildFilter() ([]unix.SockFilter, error) {
	if compiledFilter == nil {
		return nil, fmt.Errorf("no seccomp filter is compiled for %s (only amd64 and arm64)", runtime.GOARCH)
	}
	return compiledFilter, nil
}

// compileFilter compiles baseline.Seccomp for this architecture now, as
// gen_filter.go does (TestCompiledFilter holds the two equal).
func compileFilter() ([]unix.SockFilter, error) {
	a, ok := baseline.Arches[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("no seccomp filter is compiled for %s (only amd64 and arm64)", runtime.GOARCH)
	}
	raw, err := baseline.Seccomp.Compile(a)
	if err != nil {
		return nil, err
	}
	ins := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		ins[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return ins, nil
}

// installSeccomp loads the filter on every thread (allThreads), or on the
// calling thread alone when that thread then execs: either way, everything
// the sandbox ever runs inherits it.
// ConfineProcess gives every thread of this process no_new_privs and the
// commands' seccomp filter (TSYNC carries both to every thread): for an
// agent that is its sandbox's init, with no runtime to have done it (a
// microVM's guest).
func ConfineProcess() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	return installSeccomp(true)
}

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
