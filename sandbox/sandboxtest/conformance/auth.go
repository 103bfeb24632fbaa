package conformance

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

func testAuth(t *testing.T, h *harness) {
	t.Run("HealthzIsOpen", func(t *testing.T) {
		r := h.raw(t, http.MethodGet, "/healthz", "", nil)
		m := wantError(t, r, 200, "")
		if m["ok"] != true || m["protocolVersion"] != float64(wire.ProtocolVersion) {
			t.Fatalf("healthz = %s", r.body)
		}
	})
	gated := []struct{ method, uri string }{
		{"POST", "/execute"}, {"POST", "/executions/reserve"}, {"POST", "/cancel"},
		{"POST", "/executions/write"}, {"POST", "/read-file"}, {"POST", "/write-file"},
		{"GET", "/no-such-route"}, {"POST", "/healthz"}, {"GET", "/healthz?x=1"}, {"GET", "/healthz/"},
	}
	for _, tok := range []struct{ name, token string }{{"NoToken", ""}, {"WrongToken", "not-the-token"}} {
		t.Run(tok.name, func(t *testing.T) {
			for _, g := range gated {
				r := h.raw(t, g.method, g.uri, tok.token, []byte(`{"command":"true","path":"x","content":"y"}`))
				if r.status != http.StatusUnauthorized || strings.TrimSpace(string(r.body)) != `{"error":"unauthorized"}` {
					t.Errorf("%s %s: %d %s, want 401 {\"error\":\"unauthorized\"}", g.method, g.uri, r.status, r.body)
				}
				if ch := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Bearer realm=") {
					t.Errorf("%s %s: WWW-Authenticate %q", g.method, g.uri, ch)
				}
			}
		})
	}
	t.Run("WithTokenUnknownRoutesAre404", func(t *testing.T) {
		for _, g := range gated[6:] {
			r := h.raw(t, g.method, g.uri, h.Endpoint.Token, nil)
			wantError(t, r, http.StatusNotFound, "not_found")
		}
	})
	t.Run("RefusedWriteWritesNothing", func(t *testing.T) {
		r := h.raw(t, "POST", "/write-file", "wrong", []byte(`{"path":"unauth.txt","content":"x"}`))
		if r.status != 401 {
			t.Fatalf("status %d", r.status)
		}
		rr := h.post(t, "/read-file", map[string]any{"path": "unauth.txt"})
		if rr.status != 400 {
			t.Fatalf("unauthenticated write-file created a file: %d %s", rr.status, rr.body)
		}
	})
	t.Run("SchemeIsCaseInsensitive", func(t *testing.T) {
		req, _ := http.NewRequest("POST", baseURL(h.Endpoint)+"/executions/reserve", strings.NewReader("{}"))
		req.Header.Set("Authorization", "bearer   "+h.Endpoint.Token)
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("lower-case scheme: %d", resp.StatusCode)
		}
	})
}
