package conformance

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// testTCP covers byte streams to ports on the sandbox's loopback (feature
// "tcp-connect").
func testTCP(t *testing.T, h *harness) {
	ctx := context.Background()
	h.addition(t, "tcp-connect", "tcp-connect")
	// A server inside: it answers each connection with what it read, once
	// the client has half-closed (so the half-close must pass), upper-cased.
	port := 20000 + int(time.Now().UnixNano()%10000)
	s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-c", `
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", ` + strconv.Itoa(port) + `)); s.listen(8); print("ready", flush=True)
while True:
    c, _ = s.accept(); data = b""
    while True:
        b = c.recv(65536)
        if not b: break
        data += b
    c.sendall(data.upper()); c.close()
`}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = h.c.KillSession(ctx, s.ID, "KILL", 0)
		_ = h.c.ForgetSession(ctx, s.ID)
	}()
	if !eventually(15*time.Second, func() bool {
		var b strings.Builder
		_, _, _ = h.c.SessionOutput(ctx, s.ID, 0, false, func(_ string, _ int64, d []byte) error { b.Write(d); return nil })
		return strings.Contains(b.String(), "ready")
	}) {
		t.Fatal("the server inside never listened")
	}
	conn, err := h.c.DialTCP(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	// Where the host shares the sandbox's kernel the socket itself comes
	// back; elsewhere the agent relays.
	if _, passed := conn.(*net.TCPConn); passed != h.PassesTCP {
		t.Errorf("the stream came back as %T: passed %v, want %v", conn, passed, h.PassesTCP)
	}
	payload := strings.Repeat("hello, sandbox ", 100000) // 1.5 MB
	go func() {
		_, _ = io.WriteString(conn, payload)
		_ = conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	conn.Close()
	if err != nil || string(got) != strings.ToUpper(payload) {
		t.Fatalf("through the stream: %d bytes, %v", len(got), err)
	}
	// Nobody on the port: 502 connect_failed; out of range: 400.
	if _, err := h.c.DialTCP(ctx, port+1); !isCode(err, http.StatusBadGateway, wire.CodeConnectFailed) {
		t.Errorf("a port nobody listens on: %v", err)
	}
	if _, err := h.c.DialTCP(ctx, 70000); !isCode(err, http.StatusBadRequest, wire.CodeInvalidPort) {
		t.Errorf("port 70000: %v", err)
	}
}
