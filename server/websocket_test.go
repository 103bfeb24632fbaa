package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
)

// TestWebSockets: a terminal driven over the daemon's WebSocket (typing,
// a resize frame, the exit status in the close reason), and a byte stream
// to a port inside over another, with a tenant's key; without one, or with
// another tenant's, no socket opens.
func TestWebSockets(t *testing.T) {
	d := startDaemon(t)
	alice, aliceKey := d.tenant(t, "alice")
	_, bobKey := d.tenant(t, "bob")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sb := create(t, alice, api.CreateRequest{})
	dial := func(key, path string) (*websocket.Conn, *http.Response, error) {
		h := http.Header{}
		if key != "" {
			h.Set("Authorization", "Bearer "+key)
		}
		return websocket.Dial(ctx, "ws://"+d.tcp+path, &websocket.DialOptions{HTTPHeader: h})
	}

	sess, err := alice.Agent(sb.ID).StartSession(ctx, wire.SessionRequest{Command: "sh", TTY: true, Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/sandboxes/" + sb.ID + "/sessions/" + sess.ID + "/terminal"
	for _, key := range []string{"", bobKey} {
		if _, resp, err := dial(key, path); err == nil || resp == nil || resp.StatusCode/100 != 4 {
			t.Fatalf("a terminal socket with key %q: %v", key, err)
		}
	}
	ws, _, err := dial(aliceKey, path)
	if err != nil {
		t.Fatal(err)
	}
	// One reader for the socket's life (a read whose context ends closes
	// a coder/websocket connection): the screen so far, then how it ended.
	var screen testutil.SyncBuffer
	ended := make(chan error, 1)
	go func() {
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				ended <- err
				return
			}
			screen.Write(data)
		}
	}()
	waitFor := func(want string, retype string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(screen.String(), want); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never saw %q:\n%s", want, screen.String())
			}
			if retype != "" {
				ws.Write(ctx, websocket.MessageBinary, []byte(retype))
			}
		}
	}
	ws.Write(ctx, websocket.MessageBinary, []byte("echo $((6*7))x\r"))
	waitFor("42x", "")
	// The resize and the typing travel apart: ask until the size shows.
	ws.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","rows":50,"cols":132}`))
	waitFor("50 132", "stty size\r")
	ws.Write(ctx, websocket.MessageBinary, []byte("exit 5\r"))
	select {
	case err := <-ended:
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != `{"exitCode":5}` {
			t.Fatalf("the socket's end: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the terminal socket did not close after exit")
	}

	// A stream to a port inside: an upper-casing echo server.
	if _, err := alice.Agent(sb.ID).StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-c", `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 9000)); s.listen(4)
while True:
    c, _ = s.accept()
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b.upper())
    c.close()
`}}); err != nil {
		t.Fatal(err)
	}
	var tcp *websocket.Conn
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if tcp, _, err = dial(aliceKey, "/v1/sandboxes/"+sb.ID+"/tcp/9000"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the port socket: %v", err)
		}
	}
	defer tcp.CloseNow()
	tcp.Write(ctx, websocket.MessageBinary, []byte("hello over a websocket"))
	var got strings.Builder
	for got.Len() < len("hello over a websocket") {
		_, data, err := tcp.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(data)
	}
	if got.String() != "HELLO OVER A WEBSOCKET" {
		t.Fatalf("through the port socket: %q", got.String())
	}
	tcp.Close(websocket.StatusNormalClosure, "")
	if _, resp, err := dial(aliceKey, "/v1/sandboxes/"+sb.ID+"/tcp/9001"); err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a port nobody listens on: %v", err)
	}
}
