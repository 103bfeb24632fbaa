package runs

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
	"github.com/cordon-sandbox/cordon/server/client"
)

// Server serves runs over HTTP.
type Server struct {
	Runner *Runner
	// Daemon is the daemon a request's runs take their sandboxes from
	// (for the daemon's own /v1/runs, the caller's tenant on it).
	Daemon func(r *http.Request) (*client.Client, error)
	// Admission admits the questpie-shaped /run requests.
	Admission *Admission
	// Token, when set, is the bearer token Handler's POST /v1/runs takes
	// (Authorization: Bearer TOKEN); without it Handler refuses that
	// route: each run acts with the daemon key behind the server.
	Token string
	// Audit receives one JSON line per admission decision.
	Audit io.Writer
	Log   *slog.Logger

	auditMu sync.Mutex
}

// Handler serves POST /v1/runs, and the questpie server's POST /run and
// GET /health.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		if s.Token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cordon run-server"`)
			writeJSON(w, http.StatusUnauthorized, apiError{api.CodeUnauthorized, "POST /v1/runs needs the server's token (Authorization: Bearer TOKEN; cordon run-server --token-file)", ""})
			return
		}
		s.ServeRuns(w, r)
	})
	mux.HandleFunc("POST /run", s.serveCompat)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "runtime": "deno", "server": "cordon"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"ok": false, "error": "not found", "logs": []string{}})
	})
	return mux
}

type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// refusal turns an error from before the run into its status and body.
func refusal(err error) (int, apiError) {
	var inv *Invalid
	var eg *EgressRefused
	var br *BindingsRefused
	var ae *api.Error
	switch {
	case errors.As(err, &inv):
		return http.StatusBadRequest, apiError{api.CodeInvalid, inv.Error(), inv.Field}
	case errors.As(err, &eg):
		return http.StatusForbidden, apiError{"egress_refused", "egress blocked: " + eg.Error(), "capabilities"}
	case errors.As(err, &br):
		return http.StatusForbidden, apiError{"bindings_refused", br.Error(), "bindings.url"}
	case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
		return ae.Status, apiError{ae.Code, err.Error(), ""}
	}
	return http.StatusServiceUnavailable, apiError{api.CodeUnavailable, err.Error(), ""}
}

// ServeRuns is POST /v1/runs: the JSON result, or with Accept:
// application/x-ndjson (or ?stream=1) the output as it comes and then the
// result, one JSON object a line.
func (s *Server) ServeRuns(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		writeJSON(w, http.StatusRequestEntityTooLarge, apiError{api.CodeTooLarge, "the request body exceeds 2 MiB", ""})
		return
	}
	var req Request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{api.CodeInvalid, "the body is not a run request: " + err.Error(), ""})
		return
	}
	d, err := s.Daemon(r)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, apiError{api.CodeUnavailable, err.Error(), ""})
		return
	}
	if !streaming(r) {
		res, err := s.Runner.Run(r.Context(), d, req, nil)
		if err != nil {
			status, e := refusal(err)
			writeJSON(w, status, e)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	// Streamed: the header goes out with the first event, so that a
	// refusal before the run is still a plain 4xx.
	var mu sync.Mutex
	started := false
	rc := http.NewResponseController(w)
	send := func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		b, _ := json.Marshal(ev)
		_, _ = w.Write(append(b, '\n'))
		_ = rc.Flush()
	}
	res, err := s.Runner.Run(r.Context(), d, req, send)
	if err != nil {
		status, e := refusal(err)
		writeJSON(w, status, e)
		return
	}
	send(Event{Type: "result", Result: res})
}

func streaming(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") || r.URL.Query().Get("stream") == "1" || r.URL.Query().Get("stream") == "true"
}

// readBody reads at most MaxRequestBodyBytes; false when there was more.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > MaxRequestBodyBytes {
		return nil, false
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBodyBytes))
	return b, err == nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// compatRequest is the questpie server's request, checked as strictly as
// it checks it: exactly these keys, capabilities whole.
type compatRequest struct {
	Mode         string            `json:"mode"`
	Source       string            `json:"source"`
	Input        json.RawMessage   `json:"input"`
	Capabilities json.RawMessage   `json:"capabilities"`
	Secrets      map[string]string `json:"secrets"`
	Bindings     json.RawMessage   `json:"bindings"`
}

// compatResult is the questpie server's answer.
type compatResult struct {
	OK       bool            `json:"ok"`
	Output   json.RawMessage `json:"output,omitempty"`
	Logs     []string        `json:"logs"`
	Error    string          `json:"error,omitempty"`
	TimedOut bool            `json:"timedOut,omitempty"`
	Ms       *int64          `json:"ms,omitempty"`
}

func compatFail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, compatResult{Error: msg, Logs: []string{}})
}

// serveCompat is POST /run as the questpie server answers it, so that a
// questpie host can point at cordon unchanged.
func (s *Server) serveCompat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, ok := readBody(w, r)
	if !ok {
		compatFail(w, http.StatusRequestEntityTooLarge, "request body too large")
		return
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		compatFail(w, http.StatusBadRequest, "invalid JSON body")
		return
	}
	var mode string
	_ = json.Unmarshal(raw["mode"], &mode)
	adm := s.Admission
	if adm == nil {
		adm = &Admission{}
	}
	var claims *Claims
	switch mode {
	case "host":
		if !adm.hostAdmitted(r.Header.Get(HostAdmissionHeader)) {
			s.audit("denied", "host_unauthorized", nil)
			compatFail(w, http.StatusForbidden, DenialMessage)
			return
		}
	case "workload":
		env := r.Header.Get(WorkloadAdmissionHeader)
		reason := "missing"
		if env != "" && adm.WorkloadSecret != "" {
			claims, reason = adm.verifyWorkload(env, body, time.Now())
		}
		if env == "" || adm.WorkloadSecret == "" || reason != "" {
			if reason == "" {
				reason = "missing"
			}
			s.audit("denied", reason, claims)
			compatFail(w, http.StatusForbidden, DenialMessage)
			return
		}
	default:
		s.audit("denied", "unknown_mode", nil)
		compatFail(w, http.StatusForbidden, DenialMessage)
		return
	}
	p, ok := parseCompat(body)
	if !ok {
		compatFail(w, http.StatusBadRequest, "invalid sandbox request")
		return
	}
	if claims != nil {
		if !adm.consume(claims, time.Now()) {
			s.audit("denied", "replay", claims)
			compatFail(w, http.StatusForbidden, DenialMessage)
			return
		}
		s.audit("allowed", "authorized", claims)
	}
	d, err := s.Daemon(r)
	if err != nil {
		compatFail(w, http.StatusServiceUnavailable, "sandbox unavailable")
		return
	}
	res, err := s.Runner.run(r.Context(), d, p, start, nil)
	out := compatResult{Logs: []string{}}
	switch {
	case err != nil:
		var eg *EgressRefused
		var br *BindingsRefused
		switch {
		case errors.As(err, &eg):
			out.Error = "egress blocked: " + eg.Error()
		case errors.As(err, &br):
			out.Error = br.Error()
		default:
			out.Error = "failed to start the sandbox: " + err.Error()
		}
	case res.OK:
		out.OK, out.Output, out.Logs = true, res.Output, res.Logs
	default:
		out.Logs, out.Error = res.Logs, res.Error
		switch res.Reason {
		case ReasonTimeout:
			out.TimedOut, out.Logs = true, []string{}
		case ReasonCancelled:
			out.Error = "sandbox request cancelled"
		case ReasonOutput:
			out.Error, out.Logs = "sandbox output limit exceeded", []string{}
		}
	}
	if mode == "workload" && !out.OK && !out.TimedOut && out.Error != "sandbox request cancelled" {
		// A workload learns that it failed, not the host's details.
		out.Error = "sandbox execution failed"
	}
	ms := time.Since(start).Milliseconds()
	out.Ms = &ms
	writeJSON(w, http.StatusOK, out)
}

// parseCompat checks a questpie request (exact keys, the capability
// bounds) and makes it a plan: TypeScript, the seed's only language.
func parseCompat(body []byte) (*plan, bool) {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		return nil, false
	}
	for k := range raw {
		switch k {
		case "mode", "source", "input", "capabilities", "secrets", "bindings":
		default:
			return nil, false
		}
	}
	for _, k := range []string{"mode", "source", "input", "capabilities"} {
		if _, ok := raw[k]; !ok {
			return nil, false
		}
	}
	var c compatRequest
	if json.Unmarshal(body, &c) != nil || c.Source == "" || !exactKeys(c.Capabilities, "net", "import", "timeoutMs", "memoryMb") {
		return nil, false
	}
	if depth(c.Input) > 32 {
		return nil, false
	}
	var caps struct {
		Net       []string `json:"net"`
		Import    []string `json:"import"`
		TimeoutMs *float64 `json:"timeoutMs"`
		MemoryMb  *float64 `json:"memoryMb"`
	}
	if json.Unmarshal(c.Capabilities, &caps) != nil || caps.Net == nil || caps.Import == nil || !whole(caps.TimeoutMs) || !whole(caps.MemoryMb) {
		return nil, false
	}
	t, m := int64(*caps.TimeoutMs), int64(*caps.MemoryMb)
	req := Request{Language: TypeScript, Source: c.Source, Input: c.Input, Secrets: c.Secrets,
		Capabilities: &Capabilities{Net: caps.Net, Import: caps.Import, TimeoutMs: &t, MemoryMb: &m}}
	if len(c.Bindings) > 0 {
		var b Bindings
		if !exactKeys(c.Bindings, "url", "token") || json.Unmarshal(c.Bindings, &b) != nil {
			return nil, false
		}
		req.Bindings = &b
	}
	p, err := check(req)
	return p, err == nil
}

func whole(f *float64) bool { return f != nil && *f == float64(int64(*f)) }

// depth is how deeply a JSON value nests.
func depth(v json.RawMessage) int {
	d, max := 0, 0
	inString, escaped := false, false
	for _, c := range v {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			d++
			if d > max {
				max = d
			}
		case c == '}' || c == ']':
			d--
		}
	}
	return max
}

// audit writes one admission decision, as the questpie server does.
func (s *Server) audit(decision, reason string, c *Claims) {
	ev := map[string]any{"event": "questpie.sandbox.workload_admission", "boundary": "sandbox.runtime_admission", "decision": decision, "reason": reason}
	if c != nil {
		ev["supervisorInstanceId"] = c.SupervisorInstanceID
	}
	if s.Log != nil {
		s.Log.Info("run admission", "decision", decision, "reason", reason)
	}
	if s.Audit == nil {
		return
	}
	b, _ := json.Marshal(ev)
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	_, _ = s.Audit.Write(append(b, '\n'))
}
