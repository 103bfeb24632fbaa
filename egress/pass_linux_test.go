package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/testnet"
)

// echoUpstream is a loopback server (testnet.Upstream) that answers a
// connection's first byte 'p' with '!' and then echoes until EOF.
func echoUpstream(t *testing.T) (addr string, port int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testnet.Upstream(t, ln)
	return ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
}

// allowing attaches a binding of a proxy made from cfg that allows the
// loopback address and port, on a unix socket of its own.
func allowing(t *testing.T, cfg Config, port int) (*Binding, string) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "egress.sock"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg).Attach(context.Background(), "sbx", ln, Policy{Mode: Static, Rules: []Rule{{Host: "127.0.0.1", Ports: []int{port}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, ln.Addr().String()
}

// pass sends the marker with fds attached on a new connection to the
// binding and returns that connection.
func pass(t *testing.T, addr string, fds ...int) *net.UnixConn {
	c, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	if _, _, err := c.(*net.UnixConn).WriteMsgUnix([]byte{wire.EgressPass}, oob, nil); err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn)
}

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func fdOf(t *testing.T, c syscall.Conn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestPassServes: a TCP connection handed over is served as if it had come
// through the socket: CONNECT under the policy, then both ways.
func TestPassServes(t *testing.T) {
	up, port := echoUpstream(t)
	_, addr := allowing(t, Config{}, port)
	client, server := tcpPair(t)
	pass(t, addr, fdOf(t, server)).Close()
	server.Close() // the proxy holds its own reference, as the agent's bridge leaves it
	fmt.Fprintf(client, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", up, up)
	br := bufio.NewReader(client)
	if line, _ := br.ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("CONNECT answered %q", line)
	}
	br.ReadString('\n')
	client.Write([]byte("phello"))
	got := make([]byte, 6)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "!hello" {
		t.Fatalf("through the handed-over connection: %q %v", got, err)
	}
	client.CloseWrite()
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Fatalf("after EOF: %q", rest)
	}
}

// TestPassRefusesOthers: a workload can reach the proxy's socket and send
// it what it likes. Whatever is not one connected TCP socket is refused
// with 400, and every descriptor it sent is closed.
func TestPassRefusesOthers(t *testing.T) {
	_, port := echoUpstream(t)
	_, addr := allowing(t, Config{}, port)
	file, err := os.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	unixA, unixB, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(unixA)
	defer syscall.Close(unixB)
	_, one := tcpPair(t)
	_, two := tcpPair(t)
	before := openFDs(t)
	for name, fds := range map[string][]int{
		"none":      nil,
		"file":      {int(file.Fd())},
		"udp":       {fdOf(t, udp.(*net.UDPConn))},
		"listening": {fdOf(t, listener.(*net.TCPListener))},
		"unix":      {unixA},
		"two":       {fdOf(t, one), fdOf(t, two)},
	} {
		c := pass(t, addr, fds...)
		answer, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(answer), "HTTP/1.1 400") || !strings.Contains(string(answer), "handed-over connection") {
			t.Errorf("%s: answered %q, want 400 naming the handed-over connection", name, answer)
		}
	}
	// The proxy closes what it was sent as it answers; give its
	// goroutines a moment to have returned.
	deadline := time.Now().Add(5 * time.Second)
	for openFDs(t) > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := openFDs(t); after > before {
		t.Fatalf("%d descriptors open after the refusals, %d before: the proxy kept what it was sent", after, before)
	}
}

func socketPair() (int, int, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	return fds[0], fds[1], err
}

// TestTunnelIdle: a tunnel through which bytes keep moving, however few,
// stays open past IdleTimeout (the proxy reads its activity from the
// kernel once the bytes are spliced); one through which nothing moves is
// closed after it.
func TestTunnelIdle(t *testing.T) {
	up, port := echoUpstream(t)
	_, addr := allowing(t, Config{IdleTimeout: 1500 * time.Millisecond}, port)
	open := func(handOver bool) (net.Conn, *bufio.Reader) {
		var c net.Conn
		if handOver {
			client, server := tcpPair(t)
			pass(t, addr, fdOf(t, server)).Close()
			server.Close()
			c = client
		} else {
			var err error
			if c, err = net.Dial("unix", addr); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\np", up, up)
		br := bufio.NewReader(c)
		if line, _ := br.ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("CONNECT answered %q", line)
		}
		br.ReadString('\n')
		if b, _ := br.ReadByte(); b != '!' {
			t.Fatalf("upstream answered %q", b)
		}
		return c, br
	}
	for _, handOver := range []bool{true, false} {
		t.Run(fmt.Sprintf("handedOver=%v", handOver), func(t *testing.T) {
			busy, busyR := open(handOver)
			quiet, quietR := open(handOver)
			for range 8 { // 4 s, past the idle timeout twice over
				time.Sleep(500 * time.Millisecond)
				busy.Write([]byte{'x'})
				if b, err := busyR.ReadByte(); err != nil || b != 'x' {
					t.Fatalf("a tunnel in use was closed: %q %v", b, err)
				}
			}
			quiet.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := quietR.ReadByte(); err != io.EOF {
				t.Fatalf("an idle tunnel: read %v, want EOF (closed for idling)", err)
			}
		})
	}
}
