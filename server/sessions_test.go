package server_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server/api"
)

// TestSessionRoutes: the REST API's own routes for sessions, retained
// output, quiesce and flush, driven with a plain HTTP client and a
// tenant's key, on the fake tier; another tenant's key finds nothing.
func TestSessionRoutes(t *testing.T) {
	d, _ := startFakeDaemon(t)
	alice, aliceKey := d.tenant(t, "alice")
	_, bobKey := d.tenant(t, "bob")
	sb := create(t, alice, api.CreateRequest{})
	base := "http://" + d.tcp + "/v1/sandboxes/" + sb.ID
	do := func(key, method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	st, b := do(aliceKey, "POST", "/sessions", `{"id":"job","command":"sh","args":["-c","echo out; echo err >&2; exit 3"]}`)
	if st != http.StatusCreated {
		t.Fatalf("start: %d %s", st, b)
	}
	if st, _ := do(bobKey, "GET", "/sessions/job", ""); st != http.StatusNotFound {
		t.Fatalf("bob sees alice's session: %d", st)
	}
	st, b = do(aliceKey, "GET", "/sessions/job/wait?timeoutMs=10000", "")
	var s wire.Session
	if st != 200 || json.Unmarshal(b, &s) != nil || s.ExitCode == nil || *s.ExitCode != 3 {
		t.Fatalf("wait: %d %s", st, b)
	}
	st, b = do(aliceKey, "GET", "/sessions/job/output?from=0&follow=1", "")
	var streams []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		var ev wire.SessionEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == wire.SessionOutput {
			streams = append(streams, ev.Stream)
		}
	}
	if st != 200 || len(streams) != 2 || !strings.Contains(string(b), `"done":true`) {
		t.Fatalf("output: %d %s", st, b)
	}
	if st, b := do(aliceKey, "GET", "/sessions", ""); st != 200 || !strings.Contains(string(b), `"job"`) {
		t.Fatalf("list: %d %s", st, b)
	}
	if st, b := do(aliceKey, "DELETE", "/sessions/job", ""); st != http.StatusNoContent {
		t.Fatalf("forget: %d %s", st, b)
	}
	if st, _ := do(aliceKey, "GET", "/sessions/job", ""); st != http.StatusNotFound {
		t.Fatalf("a forgotten session: %d", st)
	}
	if st, b := do(aliceKey, "POST", "/flush", `{}`); st != 200 || !strings.Contains(string(b), `"ok":true`) {
		t.Fatalf("flush: %d %s", st, b)
	}
	if st, b := do(aliceKey, "POST", "/quiesce", `{}`); st != 200 || !strings.Contains(string(b), `"ok":true`) {
		t.Fatalf("quiesce: %d %s", st, b)
	}
	if st, _ := do(bobKey, "POST", "/quiesce", `{}`); st != http.StatusNotFound {
		t.Fatalf("bob quiesced alice's sandbox: %d", st)
	}
}
