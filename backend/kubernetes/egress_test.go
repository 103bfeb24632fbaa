//go:build linux

package kubernetes_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
)

// nodeAddr is the test cluster's node address, which its pods route to
// and these tests (inside its network namespace) listen on.
const nodeAddr = "192.0.2.10"

// listenNode listens for TCP and UDP on the node's address (one port for
// both) and reports what arrives on each.
func listenNode(t *testing.T) (port int, tcp, udp <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", nodeAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	port = ln.Addr().(*net.TCPAddr).Port
	pc, err := net.ListenPacket("udp", fmt.Sprintf("%s:%d", nodeAddr, port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	tc, uc := make(chan string, 16), make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 64)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _ := c.Read(b)
			c.Write([]byte("hello\n"))
			c.Close()
			tc <- string(b[:n])
		}
	}()
	go func() {
		b := make([]byte, 64)
		for {
			n, _, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			uc <- string(b[:n])
		}
	}()
	return port, tc, uc
}

// reach has the sandbox send "tcp" over TCP and "udp" as a datagram to
// the node's port, and says what the TCP connection got.
func reach(t *testing.T, sb *sandbox.Sandbox, port int) string {
	t.Helper()
	return strings.TrimSpace(adversarial.Py(t, sb, fmt.Sprintf(`
import socket, errno
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"udp", (%[1]q, %[2]d))
s = socket.socket(); s.settimeout(3)
try:
    s.connect((%[1]q, %[2]d)); s.sendall(b"tcp"); print(s.recv(16).decode().strip())
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e)))
`, nodeAddr, port)))
}

func arrived(c <-chan string, wait time.Duration) string {
	select {
	case s := <-c:
		return s
	case <-time.After(wait):
		return ""
	}
}

// TestEgress: by default a pod reaches nothing, neither over TCP nor by
// datagram; a policy allowing the node's address and port (an IP rule)
// lets TCP through to that port alone, once set on the live sandbox; taking it back closes
// the way again; and a rule naming a host is refused, with the reason,
// at create and at change.
func TestEgress(t *testing.T) {
	b := backend(t)
	port, tcp, udp := listenNode(t)
	sb := create(t, b, sandbox.Spec{})
	if got := reach(t, sb, port); got == "hello" {
		t.Fatal("a deny-all sandbox reached the node")
	}
	if s := arrived(tcp, 500*time.Millisecond) + arrived(udp, 500*time.Millisecond); s != "" {
		t.Fatalf("the node got %q from a deny-all sandbox", s)
	}
	allow := egress.Policy{Mode: egress.Static, Rules: []egress.Rule{{Host: nodeAddr, Ports: []int{port}}}}
	if err := sb.SetNetworkPolicy(t.Context(), allow); err != nil {
		t.Fatal(err)
	}
	// The network plugin applies the policy shortly after the API server
	// holds it: the positive control retries.
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got = reach(t, sb, port); got == "hello" {
			break
		}
	}
	if got != "hello" || arrived(tcp, 5*time.Second) != "tcp" {
		t.Fatalf("an allowed address: got %q", got)
	}
	// A rule admits TCP, as the egress proxy does on the other tiers: no
	// datagram passes.
	if s := arrived(udp, time.Second); s != "" {
		t.Fatalf("a datagram passed: %q", s)
	}
	// Another port of the same address stays closed.
	other, _, _ := listenNode(t)
	if got := reach(t, sb, other); got == "hello" {
		t.Fatal("a port the rule does not name was reached")
	}
	if err := sb.SetNetworkPolicy(t.Context(), egress.Policy{Mode: egress.DenyAll}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got = reach(t, sb, port); got != "hello" {
			break
		}
	}
	if got == "hello" {
		t.Fatal("the node is still reached after the policy was taken back")
	}
	named := egress.Policy{Mode: egress.Static, Rules: []egress.Rule{{Host: "example.test"}}}
	var unsupported *sandbox.UnsupportedError
	if err := sb.SetNetworkPolicy(t.Context(), named); !errors.As(err, &unsupported) || !strings.Contains(err.Error(), "example.test") {
		t.Fatalf("a named host at change: got %v, want an UnsupportedError naming it", err)
	}
	p := sandbox.NewProvider([]sandbox.Backend{b})
	if _, err := p.Create(t.Context(), sandbox.Spec{Egress: &named}); !errors.As(err, &unsupported) {
		t.Fatalf("a named host at create: got %v, want an UnsupportedError", err)
	}
}
