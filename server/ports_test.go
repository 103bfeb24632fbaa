package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server/api"
)

// TestExposedPort: a detached python http.server in a process-tier sandbox
// (no network interface) is reached with a plain HTTP client at the port's
// URL on the daemon's TCP listener, with no API key; a wrong or missing
// token, a revoked port, or another tenant asking is refused.
func TestExposedPort(t *testing.T) {
	d := startDaemon(t)
	alice, _ := d.tenant(t, "alice")
	bob, _ := d.tenant(t, "bob")
	ctx := t.Context()
	sb := create(t, alice, api.CreateRequest{})
	sh(t, alice, sb.ID, "mkdir -p site && echo hello-port > site/index.html")
	ac := alice.Agent(sb.ID)
	if _, err := ac.StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-m", "http.server", "8000", "--bind", "127.0.0.1"}, Cwd: "site"}); err != nil {
		t.Fatal(err)
	}
	p, err := alice.ExposePort(ctx, sb.ID, 8000)
	if err != nil || p.Port != 8000 || !strings.HasPrefix(p.URL, "/v1/ports/") {
		t.Fatalf("expose: %+v %v", p, err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + d.tcp + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var status int
	var body string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if status, body = get(p.URL + "index.html"); status == 200 && body == "hello-port\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the port's URL: %d %q", status, body)
		}
	}
	// Another tenant neither sees nor exposes alice's ports.
	if _, err := bob.Ports(ctx, sb.ID); err == nil {
		t.Error("bob listed alice's ports")
	}
	if _, err := bob.ExposePort(ctx, sb.ID, 8000); err == nil {
		t.Error("bob exposed alice's port")
	}
	// A wrong token, or none, is a missing page.
	if st, _ := get("/v1/ports/pt_" + strings.Repeat("0", 48) + "/index.html"); st != 404 {
		t.Errorf("a wrong token: %d", st)
	}
	if st, _ := get("/v1/ports//index.html"); st == 200 {
		t.Errorf("no token: %d", st)
	}
	// Exposing again answers the same URL; out of range is refused.
	if again, err := alice.ExposePort(ctx, sb.ID, 8000); err != nil || again.URL != p.URL {
		t.Errorf("exposed again: %+v %v", again, err)
	}
	if _, err := alice.ExposePort(ctx, sb.ID, 70000); err == nil {
		t.Error("port 70000 was exposed")
	}
	// A port nobody listens on answers 502 through its URL.
	q, err := alice.ExposePort(ctx, sb.ID, 8001)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := get(q.URL); st != http.StatusBadGateway {
		t.Errorf("a port nobody listens on: %d", st)
	}
	// An upgraded connection (what a WebSocket is) passes through the
	// port's URL: a server inside that switches protocols and then echoes
	// what it reads, upper-cased.
	if _, err := ac.StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-c", `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8002)); s.listen(4)
while True:
    c, _ = s.accept(); head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    if b"upgrade: echo" in head.lower():
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        while True:
            b = c.recv(4096)
            if not b: break
            c.sendall(b.upper())
    c.close()
`}}); err != nil {
		t.Fatal(err)
	}
	up, err := alice.ExposePort(ctx, sb.ID, 8002)
	if err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	var br *bufio.Reader
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if conn, err = net.Dial("tcp", d.tcp); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", up.URL)
		br = bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no upgrade through the port's URL: %v %+v", err, resp)
		}
	}
	defer conn.Close()
	io.WriteString(conn, "upgraded\n")
	if line, err := br.ReadString('\n'); err != nil || line != "UPGRADED\n" {
		t.Fatalf("through the upgraded connection: %q %v", line, err)
	}
	// Revoked, the URL is gone.
	if err := alice.RevokePort(ctx, sb.ID, 8000); err != nil {
		t.Fatal(err)
	}
	if st, _ := get(p.URL + "index.html"); st != 404 {
		t.Errorf("a revoked port: %d", st)
	}
}
