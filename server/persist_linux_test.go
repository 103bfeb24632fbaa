package server_test

import (
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
)

// TestPersistentIdleStops: a persistent sandbox idle past its idle
// timeout is stopped (suspended, event "suspended" with reason idle), not
// destroyed, and a stopped one is never reaped for idleness; it starts
// again with its files. A sandbox without a persistent workspace is
// destroyed as before.
func TestPersistentIdleStops(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	ctx, evs := subscribe(t, c)
	sb := create(t, c, api.CreateRequest{Spec: api.Spec{PersistentWorkspace: true}, IdleTimeoutSeconds: 1})
	plain := create(t, c, api.CreateRequest{IdleTimeoutSeconds: 1})
	if out := sh(t, c, sb.ID, "echo kept > f && cat f"); out != "kept\n" {
		t.Fatalf("write: %q", out)
	}
	ev := waitEvent(t, ctx, evs, api.EventSuspended, sb.ID)
	if ev.Data["reason"] != "idle" {
		t.Fatalf("suspended for %v, want idle", ev.Data["reason"])
	}
	waitEvent(t, ctx, evs, api.EventDestroyed, plain.ID)
	// Stopped, it stays (the reaper runs every 100 ms here).
	time.Sleep(1500 * time.Millisecond)
	got, err := c.Get(t.Context(), sb.ID)
	if err != nil || got.State != api.StateSuspended {
		t.Fatalf("a stopped persistent sandbox after its idle timeout: %+v %v", got, err)
	}
	if _, err := c.Resume(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, c, sb.ID, "cat f"); out != "kept\n" {
		t.Fatalf("after an idle stop and a start: %q", out)
	}
	// Asking for autostart without a persistent workspace is the caller's
	// mistake.
	_, err = c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Autostart: true}})
	wantCode(t, err, 400, api.CodeInvalid)
}
