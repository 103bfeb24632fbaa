//go:build linux && (amd64 || arm64)

// An external test package: startnofile must keep importing nothing, or it
// would be initialised after syscall (see the package comment).
package startnofile_test

import (
	"testing"

	"github.com/cordon-sandbox/cordon/agent/clonexec/internal/startnofile"
	"golang.org/x/sys/unix"
)

// TestLimit: the limit was read, its hard part is the hard limit now, and
// its soft part is no more than now (the runtime may have raised it). That
// it is the limit from before the raise is checked by clonexec's
// TestNofileRestored, in a process started with a lowered soft limit.
func TestLimit(t *testing.T) {
	cur, max, ok := startnofile.Limit()
	if !ok {
		t.Fatal("the start-up limit was not read")
	}
	var now unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	if max != now.Max || cur > now.Cur || cur == 0 {
		t.Fatalf("read %d/%d at start-up, %d/%d now", cur, max, now.Cur, now.Max)
	}
}
