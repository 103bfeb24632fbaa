package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// TestStalledStream: an agent that promised heartbeats and then goes silent
// (frozen, or its connection wedged) fails the stream after StallBeats of
// them, rather than holding its caller for good; one that beats is never
// taken for stalled, however long its command is silent.
func TestStalledStream(t *testing.T) {
	for _, beats := range []bool{false, true} {
		sock := filepath.Join(t.TempDir(), "agent.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(wire.HeartbeatHeader) != "1000" {
				t.Errorf("asked for heartbeats %q, want 1000", r.Header.Get(wire.HeartbeatHeader))
			}
			w.Header().Set(wire.HeartbeatHeader, "1000")
			w.WriteHeader(200)
			w.Write([]byte(`{"type":"stdout_delta","data":"hi"}` + "\n"))
			w.(http.Flusher).Flush()
			for i := 0; i < 5; i++ {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(time.Second):
				}
				if beats {
					w.Write([]byte(`{"type":"heartbeat"}` + "\n"))
					w.(http.Flusher).Flush()
				}
			}
			w.Write([]byte(`{"type":"result","exitCode":0,"timedOut":false,"durationMs":5000,"stdoutTruncated":false,"stderrTruncated":false}` + "\n"))
		})}
		go srv.Serve(ln)
		c := client.New(client.Endpoint{Network: "unix", Address: sock})
		c.SetHeartbeat(time.Second)
		var result bool
		err = c.Execute(context.Background(), wire.ExecuteRequest{Command: "x"}, func(ev wire.Event) error {
			result = result || ev.Type == wire.EventResult
			return nil
		})
		srv.Close()
		c.Close()
		switch {
		case beats && (err != nil || !result):
			t.Errorf("a beating stream: %v (result %v)", err, result)
		case !beats && !errors.Is(err, client.ErrStalled):
			t.Errorf("a silent stream: %v (result %v), want ErrStalled before its end", err, result)
		}
	}
}
