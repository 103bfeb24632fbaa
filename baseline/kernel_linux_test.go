package baseline_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cordon-sandbox/cordon/baseline"
	"golang.org/x/sys/unix"
)

const childEnv = "CORDON_BASELINE_FILTER_CHILD"

// TestFilterOnKernel loads the compiled filter into a child process (this
// test binary again) and makes the calls it refuses there, with a positive
// control for each: the kernel, not an interpreter, gives the answers.
func TestFilterOnKernel(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		filterChild(t)
		return
	}
	if _, ok := baseline.Arches[runtime.GOARCH]; !ok {
		t.Skipf("no filter is compiled for %s", runtime.GOARCH)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFilterOnKernel$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "filter held") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func filterChild(t *testing.T) {
	dir := os.Getenv(childEnv)
	raw, err := baseline.Seccomp.Compile(baseline.Arches[runtime.GOARCH])
	if err != nil {
		t.Fatal(err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	// Before the filter: the controls that must work, and would not under
	// a filter that refused everything.
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		t.Fatalf("load the filter: %v", e)
	}
	expect := func(what string, got, want error) {
		t.Helper()
		if !errors.Is(got, want) && got != want {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
	}
	expect("fchmod 0755", f.Chmod(0o755), nil)
	expect("fchmod 4755", f.Chmod(0o4755|os.ModeSetuid), syscall.EPERM)
	expect("unshare user", unix.Unshare(unix.CLONE_NEWUSER), syscall.EPERM)
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	expect("socket unix", err, nil)
	unix.Close(s)
	_, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	expect("socket packet", err, syscall.EAFNOSUPPORT)
	_, _, e := unix.Syscall(1000, 0, 0, 0)
	expect("call 1000", e, syscall.ENOSYS)
	_, _, e = unix.Syscall(unix.SYS_KEYCTL, 0, 0, 0)
	expect("keyctl", e, syscall.EPERM)
	if _, err := os.ReadDir(dir); err != nil {
		t.Errorf("read a directory: %v", err)
	}
	// A new thread and a child process run under it too.
	out, err := exec.Command("/bin/sh", "-c", "echo ok").Output()
	if err != nil || string(out) != "ok\n" {
		t.Errorf("a child under the filter: %q, %v", out, err)
	}
	if !t.Failed() {
		t.Log("filter held")
	}
}
