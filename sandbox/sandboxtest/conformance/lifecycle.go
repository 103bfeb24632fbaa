package conformance

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

func testBodies(t *testing.T, start Factory) {
	h := for2(t, Settings{"MAX_BODY_BYTES": "1024"}, start)
	big := []byte(`{"path":"big.txt","content":"` + strings.Repeat("x", 2048) + `"}`)
	for _, route := range []string{wire.RouteExecute, wire.RouteWriteFile, wire.RouteReadFile, wire.RouteCancel} {
		wantError(t, h.raw(t, http.MethodPost, route, h.Endpoint.Token, big), 400, wire.CodeInvalidBody)
	}
	if r, _ := h.read(t, map[string]any{"path": "big.txt"}); r.status != 400 {
		t.Fatal("an oversized write-file was written")
	}
	// Streamed without a declared length, it is cut off all the same.
	req, _ := http.NewRequest(http.MethodPost, baseURL(h.Endpoint)+wire.RouteWriteFile, struct{ *bytes.Reader }{bytes.NewReader(big)})
	req.Header.Set("Authorization", "Bearer "+h.Endpoint.Token)
	resp, err := h.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("chunked oversized body: %d", resp.StatusCode)
	}
}

func testLifecycle(t *testing.T, start Factory) {
	t.Run("UnconfirmedStopRetires", func(t *testing.T) {
		h := for2(t, Settings{"CANCEL_CONFIRM_TIMEOUT_MS": "1", "CANCEL_GRACE_MS": "250"}, start)
		if h.Exited == nil || h.ExitCode == nil {
			t.Skip("this target cannot observe its agent's exit status")
		}
		id := h.reserve(t)
		go h.executeNoFatal(map[string]any{"executionId": id, "command": "sh", "args": []string{"-c", "trap '' TERM; while :; do sleep 0.05; done"}})
		time.Sleep(300 * time.Millisecond)
		wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": id}), http.StatusGatewayTimeout, wire.CodeCancellationUnconfirmed)
		h.wantExit(t, 1, 10*time.Second)
	})
	t.Run("IdleExit", func(t *testing.T) {
		// The clock runs from the agent's start, and the host's polls for
		// readiness are no activity: 400 ms was too little for a loaded
		// cluster's pod (its agent gone before the host reached it).
		h := for2(t, Settings{"IDLE_TIMEOUT_MS": "2000"}, start)
		if h.Exited == nil || h.ExitCode == nil {
			t.Skip("this target cannot observe its agent's exit status")
		}
		// Work holds the agent; healthz does not.
		r := h.execute(t, map[string]any{"command": "sleep", "args": []string{"2.5"}})
		if r.result == nil || r.result.ExitCode != 0 {
			t.Fatalf("an agent exited while a command ran: %+v", r.result)
		}
		for range 3 {
			h.raw(t, http.MethodGet, "/healthz", "", nil)
			time.Sleep(50 * time.Millisecond)
		}
		h.wantExit(t, 0, 10*time.Second)
	})
	t.Run("SIGTERMStopsEverything", func(t *testing.T) {
		h := for2(t, Settings{}, start)
		if h.Exited == nil || h.Signal == nil || h.ExitCode == nil {
			t.Skip("this target cannot signal its agent")
		}
		if h.Reference {
			t.Skip("cordon improvement over the reference: SIGTERM stops every command before the agent exits")
		}
		pids := strings.Fields(h.sh(t, "sleep 300 >/dev/null 2>&1 & echo $!; setsid sleep 300 >/dev/null 2>&1 & echo $!"))
		go h.executeNoFatal(map[string]any{"command": "sh", "args": []string{"-c", "trap '' TERM; sleep 300"}})
		time.Sleep(200 * time.Millisecond)
		if err := h.Signal("TERM"); err != nil {
			t.Fatal(err)
		}
		h.wantExit(t, 0, 10*time.Second)
		if h.HostPIDGone != nil {
			for _, pid := range pids {
				if !eventually(2*time.Second, func() bool { return h.HostPIDGone(pid) }) {
					t.Errorf("process %s outlived its agent", pid)
				}
			}
		}
	})
}

// wantExit waits for the agent to exit with code.
func (h *harness) wantExit(t *testing.T, code int, within time.Duration) {
	t.Helper()
	select {
	case <-h.Exited:
	case <-time.After(within):
		t.Fatalf("agent did not exit within %v", within)
	}
	if c := h.ExitCode(); c != code {
		t.Fatalf("agent exit code %d, want %d", c, code)
	}
}
