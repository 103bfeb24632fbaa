package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
)

// TestDaemonMetricsHistory: a daemon reading its sandboxes' metrics every
// 200 ms keeps 2 s of them (10 readings) for each: cordon stats --history
// shows them in order, a busy stretch as CPU use; a paused sandbox gets no
// new readings and keeps its old ones; reading the history keeps no idle
// sandbox alive; a window that is no time is refused.
func TestDaemonMetricsHistory(t *testing.T) {
	testutil.RequiresRoot(t)
	_, sock, d := serveInTemp(t, "--metrics-interval", "200ms", "--metrics-history", "2s")
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	run := func(args ...string) (string, string, int) {
		return cordon(t, append(args[:1:1], append([]string{host}, args[1:]...)...)...)
	}
	out, errOut, code := run("create", "--cpus", "1")
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	id := strings.TrimSpace(out)
	defer run("rm", id)
	if _, errOut, code := run("exec", id, "--", "sh", "-c", "end=$(($(date +%s)+2)); while [ $(date +%s) -lt $end ]; do :; done"); code != 0 {
		t.Fatalf("exec: %s", errOut)
	}
	history := func() api.MetricsHistory {
		t.Helper()
		out, errOut, code := run("stats", "--history", "-o", "json", id)
		var h api.MetricsHistory
		if code != 0 || json.Unmarshal([]byte(out), &h) != nil {
			t.Fatalf("stats --history: %d %q %s", code, out, errOut)
		}
		return h
	}
	h := history()
	if h.IntervalMs != 200 || len(h.Metrics) < 5 || len(h.Metrics) > 10 {
		t.Fatalf("the history: every %d ms, %d readings", h.IntervalMs, len(h.Metrics))
	}
	busy := false
	for i, m := range h.Metrics {
		if i > 0 && !m.Timestamp.After(h.Metrics[i-1].Timestamp) {
			t.Fatalf("readings out of order: %v then %v", h.Metrics[i-1].Timestamp, m.Timestamp)
		}
		if m.CPUCount != 1 || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 || m.MemoryLimitBytes != 0 && m.MemoryBytes == nil {
			t.Fatalf("a reading: %+v", m)
		}
		busy = busy || m.CPUUsedPct > 10
	}
	if !busy {
		t.Errorf("no reading shows the busy loop: %+v", h.Metrics)
	}
	// --since: only the last readings.
	out, _, _ = run("stats", "--history", "--since", "1s", id)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) < 2 || len(lines) > 7 || !strings.HasPrefix(lines[0], "TIME ") {
		t.Errorf("stats --history --since 1s:\n%s", out)
	}
	// Paused: no new readings, the old ones kept.
	if _, errOut, code := run("pause", id); code != 0 {
		t.Fatalf("pause: %s", errOut)
	}
	paused := history()
	time.Sleep(time.Second)
	if again := history(); len(again.Metrics) == 0 || !again.Metrics[len(again.Metrics)-1].Timestamp.Equal(paused.Metrics[len(paused.Metrics)-1].Timestamp) {
		t.Errorf("readings of a paused sandbox: %d, the last at %v (before: %v)", len(again.Metrics), again.Metrics[len(again.Metrics)-1].Timestamp, paused.Metrics[len(paused.Metrics)-1].Timestamp)
	}
	if _, errOut, code := run("resume", id); code != 0 {
		t.Fatalf("resume: %s", errOut)
	}

	// A sandbox with an idle timeout of 1 s is reaped though the daemon
	// reads it five times a second.
	out, errOut, code = run("create", "--idle", "1s")
	if code != 0 {
		t.Fatalf("create --idle: %s", errOut)
	}
	idler := strings.TrimSpace(out)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out, _, _ := run("ls", "-o", "json"); !strings.Contains(out, idler) || strings.Contains(out, `"destroyed"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a sandbox the daemon reads was never reaped for idleness")
		}
	}

	// Refusals: a window that is no time, a sandbox that is not there.
	c := unixHTTP(sock)
	for _, q := range []string{"start=yesterday", "end=-5", "start=2026-12-06T10:00:00Z&end=2026-12-06T09:00:00Z"} {
		resp, err := c.Get("http://cordon/v1/sandboxes/" + id + "/metrics/history?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "invalid_request") {
			t.Errorf("%s: %d %s", q, resp.StatusCode, body)
		}
	}
	if _, errOut, code := run("stats", "--history", "sbx_0000000000000000"); code == 0 || !strings.Contains(errOut, "no sandbox") {
		t.Errorf("the history of no sandbox: %d %s", code, errOut)
	}
}
