package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
)

// TestTCPPassthrough: a byte stream to a port inside through the agent
// passthrough (what cordon port-forward opens), which the daemon splices
// to the socket the agent hands over. It counts as one of the tenant's
// streams while open, and a sandbox's teardown ends it even when the
// caller sits idle and never closes: the daemon keeps no stream, and no
// socket into a sandbox, that is gone.
func TestTCPPassthrough(t *testing.T) {
	d := startDaemon(t, func(c *server.Config) { c.Limits.MaxStreamsPerTenant = 1 })
	alice, _ := d.tenant(t, "alice")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	sb, err := alice.Create(ctx, api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := false
	defer func() {
		if !deleted {
			_ = alice.Delete(context.Background(), sb.ID)
		}
	}()
	ac := alice.Agent(sb.ID)
	const port = 7100
	// Inside: a server that answers each chunk upper-cased and keeps the
	// connection until its caller closes it.
	if _, err := ac.StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-c", `
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", ` + strconv.Itoa(port) + `)); s.listen(8)
def serve(c):
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b.upper())
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
`}}); err != nil {
		t.Fatal(err)
	}
	var conn io.ReadWriteCloser
	for deadline := time.Now().Add(15 * time.Second); conn == nil; time.Sleep(50 * time.Millisecond) {
		c, err := ac.DialTCP(ctx, port)
		if err == nil {
			conn = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server inside never listened: %v", err)
		}
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "PING" {
		t.Fatalf("through the stream: %q, %v", buf, err)
	}
	// The open stream is the tenant's one.
	if _, err := ac.DialTCP(ctx, port); !isStatus(err, http.StatusTooManyRequests) {
		t.Fatalf("a second stream past the quota: %v", err)
	}
	if err := alice.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	deleted = true
	// The caller reads the end, and writes nothing more, ever.
	got := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(conn)
		got <- err
	}()
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream outlived its sandbox's teardown")
	}
	// Its stream is released though the caller holds its end open: the
	// next sandbox's stream is refused by the agent (nobody listens), not
	// by the quota; the agent's refusals pass unchanged.
	sb2, err := alice.Create(ctx, api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Delete(context.Background(), sb2.ID)
	ac2 := alice.Agent(sb2.ID)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := ac2.DialTCP(ctx, port)
		if isStatus(err, http.StatusBadGateway) {
			var ce *client.Error
			if errors.As(err, &ce) && ce.Code != wire.CodeConnectFailed {
				t.Fatalf("nobody on the port: %v", err)
			}
			break
		}
		if !isStatus(err, http.StatusTooManyRequests) || time.Now().After(deadline) {
			t.Fatalf("after the teardown: %v", err)
		}
	}
	if _, err := ac2.DialTCP(ctx, 70000); !isStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), wire.CodeInvalidPort) {
		t.Fatalf("port 70000: %v", err)
	}
}

func isStatus(err error, status int) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Status == status
}
