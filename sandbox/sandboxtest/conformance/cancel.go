package conformance

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

var idPattern = regexp.MustCompile(`^exec_[0-9a-f-]{36}$`)

func testReserve(t *testing.T, h *harness, start Factory) {
	t.Run("Shape", func(t *testing.T) {
		r := h.post(t, wire.RouteReserve, map[string]any{})
		if r.status != http.StatusCreated {
			t.Fatalf("status %d", r.status)
		}
		m := r.json(t)
		id, _ := m["executionId"].(string)
		if m["ok"] != true || m["protocolVersion"] != float64(2) || !idPattern.MatchString(id) ||
			m["normalExitPolicy"] != "strict" || m["leaseExpiresAt"].(float64) < float64(time.Now().UnixMilli()) {
			t.Fatalf("reservation %s", r.body)
		}
		stdio := m["stdio"].(map[string]any)
		if stdio["version"] != float64(1) || stdio["maxLifetimeMs"].(float64) <= 0 {
			t.Fatalf("stdio %v", stdio)
		}
	})
	t.Run("RunOnce", func(t *testing.T) {
		id := h.reserve(t)
		r := h.execute(t, map[string]any{"executionId": id, "command": "echo", "args": []string{"once"}})
		if r.stdout != "once\n" {
			t.Fatalf("stdout %q", r.stdout)
		}
		r = h.execute(t, map[string]any{"executionId": id, "command": "echo", "args": []string{"twice"}})
		m := wantError(t, &response{status: r.status, body: r.body, reference: h.Reference}, http.StatusConflict, wire.CodeExecutionNotReserved)
		if m["state"] != "completed" {
			t.Fatalf("state %v", m["state"])
		}
		// The terminal record answers cancel with the real result.
		c := h.post(t, wire.RouteCancel, map[string]any{"executionId": id})
		cm := wantError(t, c, 200, "")
		if cm["state"] != "completed" || cm["started"] != true || cm["result"].(map[string]any)["exitCode"] != float64(0) {
			t.Fatalf("cancel of completed: %s", c.body)
		}
	})
	t.Run("UnknownAndInvalidIDs", func(t *testing.T) {
		r := h.execute(t, map[string]any{"executionId": "exec_00000000-0000-4000-8000-000000000000", "command": "true"})
		wantError(t, &response{status: r.status, body: r.body, reference: h.Reference}, http.StatusNotFound, wire.CodeUnknownExecution)
		r = h.execute(t, map[string]any{"executionId": "nope", "command": "true"})
		wantError(t, &response{status: r.status, body: r.body, reference: h.Reference}, http.StatusBadRequest, wire.CodeInvalidExecutionID)
		wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": "exec_00000000-0000-4000-8000-000000000000"}), 404, wire.CodeUnknownExecution)
		wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": 12}), 400, wire.CodeInvalidExecutionID)
	})
	t.Run("LeaseExpires", func(t *testing.T) {
		h2 := for2(t, Settings{"EXECUTION_LEASE_TTL_MS": "150"}, start)
		id := h2.reserve(t)
		time.Sleep(300 * time.Millisecond)
		r := h2.execute(t, map[string]any{"executionId": id, "command": "true"})
		wantError(t, &response{status: r.status, body: r.body, reference: h.Reference}, http.StatusNotFound, wire.CodeUnknownExecution)
	})
	t.Run("Capacity", func(t *testing.T) {
		h2 := for2(t, Settings{"MAX_TRACKED_EXECUTIONS": "2"}, start)
		a := h2.reserve(t)
		h2.reserve(t)
		wantError(t, h2.post(t, wire.RouteReserve, map[string]any{}), http.StatusServiceUnavailable, wire.CodeExecutionCapacity)
		// A terminal record is evicted to make room; live ones never are.
		wantError(t, h2.post(t, wire.RouteCancel, map[string]any{"executionId": a}), 200, "")
		h2.reserve(t)
		wantError(t, h2.post(t, wire.RouteCancel, map[string]any{"executionId": a}), 404, wire.CodeUnknownExecution)
	})
	t.Run("SpareYields", func(t *testing.T) {
		if !h.c.HasFeature(context.Background(), "spare-leases") {
			if h.Reference {
				t.Skip("cordon addition: the reference worker has no spare leases")
			}
			t.Fatal("cordon-agent does not advertise spare-leases")
		}
		h2 := for2(t, Settings{"MAX_TRACKED_EXECUTIONS": "2"}, start)
		spare := func() string {
			r := h2.rawWith(t, http.MethodPost, wire.RouteReserve, h2.Endpoint.Token, []byte(`{}`), http.Header{wire.LeaseHeader: {wire.LeaseSpare}})
			if r.status != http.StatusCreated {
				t.Fatalf("spare reserve: %d %s", r.status, r.body)
			}
			return r.json(t)["executionId"].(string)
		}
		// A spare gives its slot to a reservation asked for ...
		old, young := spare(), spare()
		asked := h2.reserve(t)
		r := h2.execute(t, map[string]any{"executionId": old, "command": "true"})
		wantError(t, &response{status: r.status, body: r.body, reference: h.Reference}, http.StatusNotFound, wire.CodeUnknownExecution)
		// ... the oldest first, and a reservation asked for never yields.
		h2.reserve(t)
		wantError(t, h2.post(t, wire.RouteReserve, map[string]any{}), http.StatusServiceUnavailable, wire.CodeExecutionCapacity)
		wantError(t, h2.post(t, wire.RouteCancel, map[string]any{"executionId": young}), 404, wire.CodeUnknownExecution)
		if r := h2.execute(t, map[string]any{"executionId": asked, "command": "true"}); r.status != http.StatusOK {
			t.Fatalf("the reservation asked for: %d %s", r.status, r.body)
		}
	})
	t.Run("NextLease", func(t *testing.T) {
		if !h.c.HasFeature(context.Background(), "next-lease") {
			if h.Reference {
				t.Skip("cordon addition: the reference worker sends no next lease")
			}
			t.Fatal("cordon-agent does not advertise next-lease")
		}
		h2 := for2(t, Settings{"MAX_TRACKED_EXECUTIONS": "2"}, start)
		asking := http.Header{wire.LeaseHeader: {wire.LeaseNext}}
		run := func(id string, hdr http.Header) *response {
			body, _ := json.Marshal(map[string]any{"executionId": id, "command": "true"})
			return h2.rawWith(t, http.MethodPost, wire.RouteExecute, h2.Endpoint.Token, body, hdr)
		}
		// Not asked, none comes.
		if r := run(h2.reserve(t), nil); r.status != http.StatusOK || r.header.Get(wire.NextLeaseHeader) != "" {
			t.Fatalf("unasked: %d, next lease %q", r.status, r.header.Get(wire.NextLeaseHeader))
		}
		// Asked, the answer names a spare that runs the next command ...
		r := run(h2.reserve(t), asking)
		id, ms, ok := strings.Cut(r.header.Get(wire.NextLeaseHeader), " ")
		if r.status != http.StatusOK || !ok || !wire.ValidExecutionID(id) {
			t.Fatalf("asked: %d, next lease %q", r.status, r.header.Get(wire.NextLeaseHeader))
		}
		if until, err := strconv.ParseInt(ms, 10, 64); err != nil || time.UnixMilli(until).Before(time.Now()) {
			t.Fatalf("the next lease ends at %q", ms)
		}
		next := run(id, asking)
		if next.status != http.StatusOK || !strings.Contains(string(next.body), `"type":"result"`) {
			t.Fatalf("the next lease's command: %d %s", next.status, next.body)
		}
		// ... and a refused command gets none.
		if r := run(id, asking); r.status != http.StatusConflict || r.header.Get(wire.NextLeaseHeader) != "" {
			t.Fatalf("a used lease: %d, next lease %q", r.status, r.header.Get(wire.NextLeaseHeader))
		}
		// At capacity with reservations asked for (the spare from the last
		// command yields its slot to the second), the command runs and
		// none comes.
		asked := h2.reserve(t)
		h2.reserve(t)
		if r := run(asked, asking); r.status != http.StatusOK || r.header.Get(wire.NextLeaseHeader) != "" {
			t.Fatalf("at capacity: %d, next lease %q", r.status, r.header.Get(wire.NextLeaseHeader))
		}
	})
}

func testCancel(t *testing.T, h *harness) {
	t.Run("Reserved", func(t *testing.T) {
		id := h.reserve(t)
		m := wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": id}), 200, "")
		if m["state"] != "cancelled" || m["started"] != false || m["result"].(map[string]any)["exitCode"] != float64(1) {
			t.Fatalf("cancel reserved: %v", m)
		}
		r := h.execute(t, map[string]any{"executionId": id, "command": "touch", "args": []string{"must-not-exist"}})
		mm := wantError(t, &response{status: r.status, body: r.body, reference: h.Reference}, http.StatusConflict, wire.CodeExecutionNotReserved)
		if mm["state"] != "cancelled" {
			t.Fatalf("state %v", mm["state"])
		}
		if rr := h.post(t, wire.RouteReadFile, map[string]any{"path": "must-not-exist"}); rr.status != 400 {
			t.Fatal("a cancelled reservation ran its command")
		}
	})
	// startTracked starts a reserved command and returns its id and a
	// channel with the finished stream.
	startTracked := func(t *testing.T, script string) (string, <-chan *run) {
		id := h.reserve(t)
		ch := make(chan *run, 1)
		go func() {
			ch <- h.executeNoFatal(map[string]any{"executionId": id, "command": "sh", "args": []string{"-c", script}})
		}()
		return id, ch
	}
	waitFile := func(t *testing.T, name string) string {
		var out string
		if !eventually(10*time.Second, func() bool {
			r := h.post(t, wire.RouteReadFile, map[string]any{"path": name})
			if r.status == 200 {
				out, _ = r.json(t)["content"].(string)
			}
			return strings.TrimSpace(out) != ""
		}) {
			t.Fatalf("%s never appeared", name)
		}
		return strings.TrimSpace(out)
	}
	t.Run("Running", func(t *testing.T) {
		id, done := startTracked(t, "echo started > cancel-running.txt; exec sleep 30")
		waitFile(t, "cancel-running.txt")
		begin := time.Now()
		m := wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": id}), 200, "")
		if m["state"] != "cancelled" || m["started"] != true || m["result"].(map[string]any)["signal"] != "SIGTERM" {
			t.Fatalf("cancel running: %v", m)
		}
		if d := time.Since(begin); d > 3*time.Second {
			t.Fatalf("cancel took %v", d)
		}
		r := <-done
		if r.result == nil || r.result.Signal != "SIGTERM" {
			t.Fatalf("stream result %+v", r.result)
		}
		// Cancel is idempotent once terminal.
		m2 := wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": id}), 200, "")
		if m2["state"] != "cancelled" {
			t.Fatalf("second cancel: %v", m2)
		}
	})
	t.Run("IgnoresSIGTERM", func(t *testing.T) {
		id, done := startTracked(t, "trap '' TERM; echo $$ > cancel-trap.txt; while :; do sleep 0.05; done")
		pid := waitFile(t, "cancel-trap.txt")
		m := wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": id}), 200, "")
		if m["result"].(map[string]any)["signal"] != "SIGKILL" {
			t.Fatalf("a SIGTERM-ignoring command must end by SIGKILL: %v", m)
		}
		<-done
		if h.alive(t, pid) {
			t.Fatalf("pid %s survived cancel", pid)
		}
	})
	t.Run("KillsBackgroundedChildren", func(t *testing.T) {
		id, done := startTracked(t, "sleep 300 & echo $! > cancel-bg.txt; wait")
		pid := waitFile(t, "cancel-bg.txt")
		if !h.alive(t, pid) {
			t.Fatal("background child not running")
		}
		wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": id}), 200, "")
		<-done
		if !eventually(2*time.Second, func() bool { return !h.alive(t, pid) }) {
			t.Fatalf("backgrounded child %s survived cancel", pid)
		}
	})
	t.Run("TimedOutTrackedIsCompleted", func(t *testing.T) {
		id := h.reserve(t)
		r := h.execute(t, map[string]any{"executionId": id, "command": "sleep", "args": []string{"30"}, "timeoutMs": 200})
		if !r.result.TimedOut {
			t.Fatalf("result %+v", r.result)
		}
		m := wantError(t, h.post(t, wire.RouteCancel, map[string]any{"executionId": id}), 200, "")
		if m["state"] != "completed" || m["result"].(map[string]any)["timedOut"] != true {
			t.Fatalf("terminal %v", m)
		}
	})
	t.Run("ClientExecCancelsOverTheWire", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(300 * time.Millisecond); cancel() }()
		res, err := h.c.Exec(ctx, "sh", clientOpts("echo $$ > client-cancel.txt; exec sleep 30"))
		if err == nil || res == nil || res.Signal != "SIGTERM" {
			t.Fatalf("res %+v err %v, want a confirmed SIGTERM stop", res, err)
		}
		pid := waitFile(t, "client-cancel.txt")
		if h.alive(t, pid) {
			t.Fatalf("command %s still running after a confirmed cancel", pid)
		}
	})
	t.Run("StrictLeftoverIsStopped", func(t *testing.T) {
		h.improvement(t, "a strict command's surviving group is stopped instead of retiring the agent")
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "sleep 300 >/dev/null 2>&1 & echo $!"}})
		if r.result == nil || r.result.ExitCode != 0 || !r.result.LeftoversStopped {
			t.Fatalf("result %+v err %q", r.result, r.errMsg)
		}
		if pid := strings.TrimSpace(r.stdout); !eventually(2*time.Second, func() bool { return !h.alive(t, pid) }) {
			t.Fatalf("leftover %s still running", pid)
		}
	})
	// A strict command ends with its leader: what it left holding its
	// output (a background child, one that called setsid) is stopped once
	// the output drained, long before any timeout, and the result reports
	// the leader's status and that leftovers were stopped.
	for _, c := range []struct{ name, script string }{
		{"LeaderExitStopsChildHoldingOutput", "sleep 300 & echo $!; exit 3"},
		{"LeaderExitStopsSetsidChildHoldingOutput", "setsid sleep 300 & echo $!; exit 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.improvement(t, "a strict command ends with its leader; the reference waits for its output to close")
			start := time.Now()
			r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", c.script}, "timeoutMs": 30000})
			if r.result == nil || r.result.ExitCode != 3 || r.result.TimedOut || !r.result.LeftoversStopped {
				t.Fatalf("result %+v err %q", r.result, r.errMsg)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("the command took %v to end after its leader", took)
			}
			if pid := strings.TrimSpace(r.stdout); !eventually(2*time.Second, func() bool { return !h.alive(t, pid) }) {
				t.Fatalf("child %s survived its command", pid)
			}
		})
	}
	// Positive control: a command that leaves nothing behind says so.
	t.Run("NoLeftoversNoNote", func(t *testing.T) {
		h.improvement(t, "leftoversStopped is cordon's")
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "(sleep 0.05; echo late) & wait; exit 5"}})
		if r.result == nil || r.result.ExitCode != 5 || r.result.LeftoversStopped || r.stdout != "late\n" {
			t.Fatalf("result %+v stdout %q", r.result, r.stdout)
		}
	})
	// A timeout still ends a command whose leader is alive, with what it
	// started, inside or outside its group.
	t.Run("TimeoutReachesSetsidChild", func(t *testing.T) {
		h.improvement(t, "a timeout also stops processes that left the group but hold its output")
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "setsid sleep 300 & echo $!; sleep 300"}, "timeoutMs": 500})
		if r.result == nil || !r.result.TimedOut {
			t.Fatalf("result %+v err %q", r.result, r.errMsg)
		}
		if pid := strings.TrimSpace(r.stdout); !eventually(2*time.Second, func() bool { return !h.alive(t, pid) }) {
			t.Fatalf("child %s survived the timeout", pid)
		}
	})
}
