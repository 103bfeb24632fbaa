package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// testQuiesce covers quiesce and flush (features "quiesce", "flush"). It
// stops everything in the sandbox, so it runs on an agent of its own.
func testQuiesce(t *testing.T, start Factory) {
	h := for2(t, Settings{}, start)
	ctx := context.Background()
	h.addition(t, "quiesce or flush", "quiesce", "flush")
	// An orphan that left every group and was reparented to the agent, a
	// session, and a command in flight.
	orphan := strings.TrimSpace(h.sh(t, "setsid sh -c 'sleep 300 >/dev/null 2>&1 & echo $!' </dev/null"))
	if !h.alive(t, orphan) {
		t.Fatalf("the orphan %s did not start", orphan)
	}
	s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", Args: []string{"-c", "trap '' TERM; sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	inflight := make(chan *wire.Result, 1)
	go func() {
		r := h.execute(t, map[string]any{"command": "sleep", "args": []string{"300.777"}})
		inflight <- r.result
	}()
	// Once it runs (the pattern's brackets keep it from matching the
	// command line of the shell that looks).
	if !eventually(10*time.Second, func() bool {
		return h.sh(t, "pgrep -f 'sleep 300[.]777' >/dev/null && echo yes || echo no") == "yes\n"
	}) {
		t.Fatal("the command in flight never started")
	}
	q, err := h.c.Quiesce(ctx, 300*time.Millisecond)
	if err != nil || !q.OK || q.Stopped == 0 {
		t.Fatalf("quiesce: %+v %v", q, err)
	}
	select {
	case r := <-inflight:
		if r == nil || r.Signal == "" {
			t.Fatalf("the command in flight: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command in flight did not end")
	}
	if w, err := h.c.WaitSession(ctx, s.ID, 5*time.Second); err != nil || w.State != wire.SessionExited {
		t.Fatalf("the session: %+v %v", w, err)
	}
	// The agent serves on: the orphan is gone, and commands run.
	if out := h.sh(t, "kill -0 "+orphan+" 2>/dev/null && echo alive || echo gone"); out != "gone\n" {
		t.Fatalf("the orphan after quiesce: %s", out)
	}
	h.sh(t, "echo data > flushed.txt")
	f, err := h.c.Flush(ctx, 10*time.Second)
	if err != nil || !f.OK || len(f.Synced) == 0 {
		t.Fatalf("flush: %+v %v", f, err)
	}
	if got, err := h.c.ReadFile(ctx, "flushed.txt"); err != nil || string(got) != "data\n" {
		t.Fatalf("after flush: %q %v", got, err)
	}
	// Bounds are refused with the field.
	if _, err := h.c.Quiesce(ctx, time.Hour); !isCode(err, 400, wire.CodeInvalidBody) {
		t.Errorf("a quiesce grace of an hour: %v", err)
	}
}
