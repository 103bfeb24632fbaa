package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// fakeAgent serves reserve and cancel, and an /execute stream that breaks
// after one delta, as a dropped connection would.
func fakeAgent(t *testing.T, cancels *atomic.Int32) client.Endpoint {
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	const id = "exec_00000000-0000-4000-8000-000000000001"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case wire.RouteHealthz:
			fmt.Fprint(w, `{"ok":true,"protocolVersion":1}`)
		case wire.RouteReserve:
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"ok":true,"protocolVersion":2,"executionId":%q}`, id)
		case wire.RouteExecute:
			w.Write([]byte(`{"type":"stdout_delta","data":"partial"}` + "\n"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-stream
		case wire.RouteCancel:
			cancels.Add(1)
			fmt.Fprint(w, `{"ok":true,"state":"completed","started":true,"result":{"exitCode":0,"timedOut":false,"durationMs":5,"stdoutTruncated":false,"stderrTruncated":false}}`)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return client.Endpoint{Network: "unix", Address: sock}
}

func TestBrokenStreamIsReconciled(t *testing.T) {
	var cancels atomic.Int32
	c := client.New(fakeAgent(t, &cancels))
	defer c.Close()
	res, err := c.Exec(context.Background(), "x", client.ExecOptions{})
	if !errors.Is(err, client.ErrIncompleteStream) || res == nil || res.ExitCode != 0 {
		t.Fatalf("res %+v err %v, want the confirmed result and ErrIncompleteStream", res, err)
	}
	if cancels.Load() != 1 {
		t.Fatalf("%d cancels, want the outcome confirmed through /cancel once", cancels.Load())
	}
}

func TestAdmitRefusesOtherVersions(t *testing.T) {
	var cancels atomic.Int32
	c := client.New(fakeAgent(t, &cancels))
	defer c.Close()
	if _, err := c.Admit(context.Background()); !errors.Is(err, client.ErrProtocolMismatch) {
		t.Fatalf("err %v, want ErrProtocolMismatch", err)
	}
	if _, err := c.WaitReady(context.Background()); !errors.Is(err, client.ErrProtocolMismatch) {
		t.Fatalf("WaitReady: %v", err)
	}
}
