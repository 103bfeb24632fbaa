package egress

import (
	"io"
	"net"
	"strings"
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

// TestCloseEndsHalfOpen: a connection that has sent nothing, or only part
// of its request head, does not hold up the binding's Close (a sandbox's
// teardown) until the head's time runs out.
func TestCloseEndsHalfOpen(t *testing.T) {
	b, addr := denyAll(t, Config{})
	silent, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	partial, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer partial.Close()
	partial.Write([]byte("CONNECT a.test:443 HTTP/1.1\r\n"))
	waitFor(t, func() bool { n, _ := b.Activity(); return n == 2 })
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // the head's own time is 30 s
		t.Fatal("Close waited on connections that had not finished their request head")
	}
}

// TestHeadTimeout: a connection that sends nothing is ended when the
// head's time runs out, and the binding serves the next one.
func TestHeadTimeout(t *testing.T) {
	b, addr := denyAll(t, Config{HeaderTimeout: 300 * time.Millisecond})
	defer b.Close()
	silent, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err := io.ReadAll(silent)
	if err != nil || !strings.HasPrefix(string(answer), "HTTP/1.1 400") {
		t.Fatalf("a silent connection: %q %v, want a 400 once the head's time is out", answer, err)
	}
	if resp := connect(t, addr, "next.invalid"); resp != "HTTP/1.1 403 Forbidden\r\n" {
		t.Fatalf("the next connection: %q", resp)
	}
}
