package egress

import (
	"net"
	"testing"
	"time"
)

func TestBindingActivity(t *testing.T) {
	b, addr := denyAll(t, Config{})
	defer b.Close()
	if n, last := b.Activity(); n != 0 || !last.IsZero() {
		t.Fatalf("fresh: %d %v", n, last)
	}
	c, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { n, _ := b.Activity(); return n == 1 })
	before := time.Now()
	c.Close() // a connection that never sends its request head ends here
	waitFor(t, func() bool { n, last := b.Activity(); return n == 0 && !last.Before(before) })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached")
}
