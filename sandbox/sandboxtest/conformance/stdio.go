package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// openStream starts an /execute stream and delivers its events on a channel,
// which is closed when the stream ends. Cancelling ctx drops the connection.
func (h *harness) openStream(t *testing.T, ctx context.Context, req any) <-chan wire.Event {
	t.Helper()
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, baseURL(h.Endpoint)+wire.RouteExecute, bytes.NewReader(b))
	hr.Header.Set("Authorization", "Bearer "+h.Endpoint.Token)
	resp, err := h.hc.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("execute: %d", resp.StatusCode)
	}
	ch := make(chan wire.Event, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		for sc.Scan() {
			var ev wire.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				ch <- ev
			}
		}
	}()
	return ch
}

func next(t *testing.T, ch <-chan wire.Event, want string) wire.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended waiting for %s", want)
			}
			if ev.Type == want {
				return ev
			}
			if ev.Type != wire.EventStdioHeartbeat && ev.Type != wire.EventStdioData {
				t.Fatalf("event %+v while waiting for %s", ev, want)
			}
		case <-timeout:
			t.Fatalf("no %s event", want)
		}
	}
}

func testStdio(t *testing.T, h *harness, start Factory) {
	t.Run("Refusals", func(t *testing.T) {
		wantError(t, h.post(t, "/execute", map[string]any{"command": "cat", "stdio": true}), 400, wire.CodeStdioRequiresReserved)
		wantError(t, h.post(t, "/execute", map[string]any{"command": "cat", "stdio": "yes"}), 400, wire.CodeInvalidStdio)
		id := h.reserve(t)
		wantError(t, h.post(t, "/execute", map[string]any{"executionId": id, "command": "cat", "stdio": true, "stdin": "x"}), 400, wire.CodeStdioRequiresReserved)
		wantError(t, h.post(t, wire.RouteStdioWrite, map[string]any{"executionId": id, "data": "aGk="}), 409, wire.CodeStdioNotRunning)
		wantError(t, h.post(t, wire.RouteStdioWrite, map[string]any{"executionId": id, "data": "not base64!"}), 400, wire.CodeInvalidStdioBytes)
		wantError(t, h.post(t, wire.RouteStdioWrite, map[string]any{"executionId": "x", "data": "aGk="}), 400, wire.CodeInvalidStdioWrite)
	})
	t.Run("RoundTrip", func(t *testing.T) {
		id := h.reserve(t)
		ch := h.openStream(t, context.Background(), map[string]any{"executionId": id, "command": "cat", "stdio": true})
		next(t, ch, wire.EventStdioStarted)
		payload := []byte("hello\x00\xff binary\n")
		m := wantError(t, h.post(t, wire.RouteStdioWrite, map[string]any{"executionId": id, "data": base64.StdEncoding.EncodeToString(payload)}), 200, "")
		if m["bytesWritten"] != float64(len(payload)) {
			t.Fatalf("write answer %v", m)
		}
		var got []byte
		for len(got) < len(payload) {
			ev := next(t, ch, wire.EventStdioData)
			if ev.Stream != "stdout" {
				t.Fatalf("stream %q", ev.Stream)
			}
			b, err := base64.StdEncoding.DecodeString(ev.Data)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, b...)
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("echoed %q, want %q", got, payload)
		}
		wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": id}), 200, "")
		res := next(t, ch, wire.EventResult)
		if res.Result == nil {
			t.Fatal("no result")
		}
	})
	t.Run("DisconnectCancels", func(t *testing.T) {
		id := h.reserve(t)
		ctx, drop := context.WithCancel(context.Background())
		ch := h.openStream(t, ctx, map[string]any{"executionId": id, "command": "sleep", "args": []string{"300"}, "stdio": true})
		next(t, ch, wire.EventStdioStarted)
		drop()
		var state string
		eventually(5*time.Second, func() bool {
			m := h.post(t, wire.RouteCancel, map[string]any{"executionId": id}).json(t)
			state, _ = m["state"].(string)
			return state == "cancelled"
		})
		if state != "cancelled" {
			t.Fatalf("dropping a stdio stream must cancel its command; state %q", state)
		}
	})
	t.Run("Heartbeat", func(t *testing.T) {
		h.improvement(t, "the stdio heartbeat interval is configurable (CORDON_AGENT_STDIO_HEARTBEAT_MS)")
		h2 := for2(t, Settings{"STDIO_HEARTBEAT_MS": "50"}, start)
		id := h2.reserve(t)
		ch := h2.openStream(t, context.Background(), map[string]any{"executionId": id, "command": "sleep", "args": []string{"300"}, "stdio": true})
		next(t, ch, wire.EventStdioStarted)
		next(t, ch, wire.EventStdioHeartbeat)
		wantError(t, h2.post(t, wire.RouteCancel, map[string]any{"executionId": id}), 200, "")
	})
}

func testExitPolicy(t *testing.T, h *harness, start Factory) {
	t.Run("ComputerLifetimeNeedsOptIn", func(t *testing.T) {
		wantError(t, h.post(t, "/execute", map[string]any{"command": "true", "normalExitPolicy": "computer-lifetime"}), 400, wire.CodeComputerLifetimeDisabled)
		wantError(t, h.post(t, "/execute", map[string]any{"command": "true", "normalExitPolicy": "forever"}), 400, wire.CodeInvalidNormalExitPolicy)
	})
	t.Run("ComputerLifetimeHandsOver", func(t *testing.T) {
		h2 := for2(t, Settings{"NORMAL_EXIT_POLICY": "computer-lifetime"}, start)
		r := h2.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "sleep 300 >/dev/null 2>&1 & echo $!"}, "normalExitPolicy": "computer-lifetime"})
		if r.result == nil || r.result.ExitCode != 0 {
			t.Fatalf("result %+v %q", r.result, r.errMsg)
		}
		pid := strings.TrimSpace(r.stdout)
		if !h2.alive(t, pid) {
			t.Fatal("a successful computer-lifetime command's application was stopped")
		}
		h2.sh(t, "kill -9 "+pid)
	})
}

// testStreamedStdin covers input that streams in and then ends (feature
// "stdin-end"), through the Go client's ExecOptions.StdinStream.
func testStreamedStdin(t *testing.T, h *harness) {
	ctx := context.Background()
	if !h.c.HasFeature(ctx, "stdin-end") {
		if h.Reference {
			t.Skip("cordon addition: the reference worker's stdio input has no end")
		}
		t.Fatal("cordon-agent does not advertise stdin-end")
	}
	t.Run("LineByLine", func(t *testing.T) {
		// The command sees the first line before the second is sent.
		pr, pw := io.Pipe()
		var out testutil.SyncBuffer
		done := make(chan error, 1)
		var res *wire.Result
		go func() {
			var err error
			res, err = h.c.Exec(ctx, "sh", client.ExecOptions{Args: []string{"-c", "while read l; do echo got-$l; done; echo eof"}, StdinStream: pr, Stdout: &out})
			done <- err
		}()
		if _, err := pw.Write([]byte("one\n")); err != nil {
			t.Fatal(err)
		}
		if !eventually(10*time.Second, func() bool { return out.String() == "got-one\n" }) {
			t.Fatalf("after the first line: %q", out.String())
		}
		pw.Write([]byte("two\n"))
		pw.Close()
		if err := <-done; err != nil || res == nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v %v", res, err)
		}
		if out.String() != "got-one\ngot-two\neof\n" {
			t.Fatalf("output %q", out.String())
		}
	})
	t.Run("Large", func(t *testing.T) {
		// More than any stdin the request body could carry, and every byte
		// value.
		const size = 48 << 20
		pattern := make([]byte, 256)
		for i := range pattern {
			pattern[i] = byte(i)
		}
		var out bytes.Buffer
		res, err := h.c.Exec(ctx, "sh", client.ExecOptions{Args: []string{"-c", "wc -c; "}, StdinStream: io.LimitReader(repeatReader(pattern), size), Stdout: &out})
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != strconv.Itoa(size) {
			t.Fatalf("exec: %+v %v, counted %q", res, err, out.String())
		}
	})
	t.Run("CommandThatStopsReading", func(t *testing.T) {
		// The input goes unread: the command's end ends the exec.
		res, err := h.c.Exec(ctx, "true", client.ExecOptions{StdinStream: repeatReader([]byte("y\n"))})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v %v", res, err)
		}
	})
}

type repeat struct {
	p   []byte
	off int
}

func repeatReader(p []byte) io.Reader { return &repeat{p: p} }

func (r *repeat) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		c := copy(b[n:], r.p[r.off:])
		n += c
		r.off = (r.off + c) % len(r.p)
	}
	return n, nil
}

// testHeartbeat: an /execute stream asked for heartbeats (feature
// "stream-heartbeat") says so in its answer and beats while the command is
// silent; the Go client, which asks for them, never takes a silent command
// for a stalled stream.
func testHeartbeat(t *testing.T, h *harness) {
	ctx := context.Background()
	if !h.c.HasFeature(ctx, "stream-heartbeat") {
		if h.Reference {
			t.Skip("cordon addition: the reference worker's execute stream has no heartbeat")
		}
		t.Fatal("cordon-agent does not advertise stream-heartbeat")
	}
	b, _ := json.Marshal(map[string]any{"command": "sleep", "args": []string{"2.5"}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, baseURL(h.Endpoint)+wire.RouteExecute, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+h.Endpoint.Token)
	req.Header.Set(wire.HeartbeatHeader, "1000")
	resp, err := h.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get(wire.HeartbeatHeader); got != "1000" {
		t.Fatalf("the answer's %s: %q", wire.HeartbeatHeader, got)
	}
	beats, result := 0, false
	if err := client.ReadEvents(resp.Body, func(ev wire.Event) error {
		switch ev.Type {
		case wire.EventHeartbeat:
			beats++
		case wire.EventResult:
			result = true
		}
		return nil
	}); err != nil || !result || beats < 2 {
		t.Fatalf("%d heartbeats, result %v, %v", beats, result, err)
	}
	// A silent command through the Go client at one beat a second.
	c := client.New(h.Endpoint)
	defer c.Close()
	c.SetHeartbeat(time.Second)
	if res, err := c.Exec(ctx, "sleep", client.ExecOptions{Args: []string{"3.5"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("a silent command: %+v %v", res, err)
	}
}
