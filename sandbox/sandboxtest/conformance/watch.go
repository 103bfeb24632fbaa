package conformance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// testWatch covers directory watches (feature "watch").
func testWatch(t *testing.T, h *harness) {
	ctx := context.Background()
	h.addition(t, "watch", "watch")
	h.sh(t, "rm -rf watched other; mkdir -p watched other")
	var mu sync.Mutex
	var events []string
	ready := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- h.c.Watch(wctx, "watched", true, func(ev wire.WatchEvent) error {
			if ev.Type == wire.WatchReady {
				close(ready)
				return nil
			}
			mu.Lock()
			e := ev.Type + " " + ev.Path
			if ev.From != "" {
				e += " from " + ev.From
			}
			events = append(events, e)
			mu.Unlock()
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the watch ended before it was ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the watch never became ready")
	}
	has := func(e string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, x := range events {
			if x == e {
				return true
			}
		}
		return false
	}
	step := func(script string, want ...string) {
		t.Helper()
		h.sh(t, script)
		for _, e := range want {
			if !eventually(10*time.Second, func() bool { return has(e) }) {
				mu.Lock()
				t.Fatalf("after %q: no %q among %q", script, e, events)
			}
		}
	}
	// Nested directories made at once (the deeper one is followed as it
	// is found); then, once watched, a file written, renamed and removed;
	// and a symlink to a directory outside, which is not followed.
	step("mkdir -p watched/a/b", "create a", "create a/b")
	step("echo x > watched/a/b/f", "write a/b/f")
	step("mv watched/a/b/f watched/a/g && rm watched/a/g", "rename a/g from a/b/f", "remove a/g")
	step("ln -s ../other watched/link && touch other/outside", "create link")
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	for _, x := range events {
		if strings.Contains(x, "outside") {
			t.Errorf("a change outside the tree was reported, through a symlink: %q", x)
		}
	}
	mu.Unlock()
	// The watched directory removed: its removal, then the end.
	h.sh(t, "rm -rf watched")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the watch ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch went on after its directory was removed")
	}
	// Refusals as the file routes make them: a path that is not there.
	if err := h.c.Watch(ctx, "no/such/dir", false, func(wire.WatchEvent) error { return nil }); err == nil {
		t.Error("a watch of a missing directory began")
	}
}
