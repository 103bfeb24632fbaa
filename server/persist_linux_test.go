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
	_, evs := subscribe(t, c)
	sb := create(t, c, api.CreateRequest{Spec: api.Spec{PersistentWorkspace: true}, IdleTimeoutSeconds: 1})
	plain := create(t, c, api.CreateRequest{IdleTimeoutSeconds: 1})
	if out := sh(t, c, sb.ID, "echo kept > f && cat f"); out != "kept\n" {
		t.Fatalf("write: %q", out)
	}
	// (In either order.)
	for stopped, destroyed := false, false; !stopped || !destroyed; {
		select {
		case ev := <-evs:
			switch {
			case ev.Type == api.EventSuspended && ev.Sandbox == sb.ID:
				if ev.Data["reason"] != "idle" {
					t.Fatalf("suspended for %v, want idle", ev.Data["reason"])
				}
				stopped = true
			case ev.Type == api.EventDestroyed && ev.Sandbox == sb.ID:
				t.Fatal("an idle persistent sandbox was destroyed")
			case ev.Type == api.EventDestroyed && ev.Sandbox == plain.ID:
				destroyed = true
			}
		case <-time.After(time.Minute):
			t.Fatalf("stopped %v, plain destroyed %v", stopped, destroyed)
		}
	}
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
