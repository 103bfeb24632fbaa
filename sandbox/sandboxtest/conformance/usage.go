package conformance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// testUsage: GET /usage (feature "usage") counts what the commands used:
// the CPU time of a command that ended grows the count, a file written
// grows the writable space's use, and a process left running is a task.
func testUsage(t *testing.T, h *harness) {
	h.addition(t, "usage count", "usage")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := h.c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.DiskTotalBytes <= 0 || before.DiskUsedBytes < 0 || before.CPUNanos < 0 {
		t.Fatalf("usage before: %+v", before)
	}
	// The CPUs it may run on, as its commands see them (one, in a
	// single-CPU virtual machine on a larger host).
	if n := strings.TrimSpace(h.sh(t, "nproc")); fmt.Sprint(before.CPUs) != n {
		t.Errorf("usage counts %d CPUs; nproc says %s", before.CPUs, n)
	}
	// A fixed amount of work (some 0.2 s of a CPU here), whatever the
	// machine's load.
	h.sh(t, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	after, err := h.c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(after.CPUNanos - before.CPUNanos); d < 50*time.Millisecond {
		t.Errorf("a command's CPU time counted as %v (before %+v, after %+v)", d, before, after)
	}
	// 4 MiB written. The count is the writable space's file system's:
	// where that is the host's own (the passthrough tier, an agent run
	// in a test), others write and free there too, so a count that
	// others' frees swamped is taken again, up to three times.
	var grew int64
	for try := range 3 {
		b, err := h.c.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h.sh(t, fmt.Sprintf("head -c 4194304 /dev/zero > usage%d.bin", try))
		a, err := h.c.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if grew = a.DiskUsedBytes - b.DiskUsedBytes; grew >= 3<<20 {
			break
		}
	}
	if grew < 3<<20 {
		t.Errorf("4 MiB written counted as %d bytes", grew)
	}
	h.sh(t, "rm -f usage*.bin")
	// Tasks: a session's process, while it runs.
	s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sleep", Args: []string{"600"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.c.KillSession(context.Background(), s.ID, "SIGKILL", time.Second)
	if u, err := h.c.Usage(ctx); err != nil || u.Tasks < 1 {
		t.Errorf("a running session counted as %+v tasks: %v", u, err)
	}
	if r := h.raw(t, "GET", wire.RouteUsage, "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("usage without the token: %d", r.status)
	}
}
