package server

import (
		"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server/api"
)

// agentProxy forwards requests to one sandbox's agent, swapping the
// caller's daemon credential for the agent's own token.
type agentProxy struct {
	ep client.Endpoint
	tr *http.Transport
}

func newAgentProxy(ep client.Endpoint) *agentProxy {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &agentProxy{ep: ep, tr: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, ep.Network, ep.Address)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}}
}

func (p *agentProxy) close() { p.tr.CloseIdleConnections() }

// forward sends r to the agent as method path?query and streams the answer
// back unchanged (flushing as it arrives, for NDJSON streams).
func (p *agentProxy) forward(w http.ResponseWriter, r *http.Request, method, path, query string) {
	rp := &httputil.ReverseProxy{
		Transport:     p.tr,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Method = method
			pr.Out.URL = &url.URL{Scheme: "http", Host: "agent", Path: path, RawQuery: query}
			pr.Out.Host = "agent"
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
			if p.ep.Token != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+p.ep.Token)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("WWW-Authenticate")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			writeError(w, http.StatusBadGateway, api.CodeAgent, "the sandbox's agent did not answer: "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}

// stream marks a request as an open stream into e for its duration: the
// tenant's stream quota, and activity the idle reaper counts.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, e *entry) (func(), bool) {
	release, ok := s.acquireStream(w, callerOf(r).tenant)
	if !ok {
		return nil, false
	}
	e.streams.Add(1)
	return func() {
		e.streams.Add(-1)
		e.touch()
		release()
	}, true
}

// handleExec runs a command as an NDJSON stream of the agent's own events.
// The execution gets an id (reserved first unless the request names one),
// returned in the Cordon-Execution-Id header; a dropped connection does not
// stop the command: only the cancel route or its timeout does.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	var req map[string]json.RawMessage
	if !readJSON(w, r, s.cfg.Limits.MaxExecBodyBytes, &req) {
		return
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	id := ""
	if raw, ok := req["executionId"]; ok {
		if json.Unmarshal(raw, &id) != nil || id == "" {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "executionId must be a non-empty string")
			return
		}
	} else {
		res, err := e.sb.Client().Reserve(r.Context())
		if err != nil {
			writeErr(w, err)
			return
		}
		id = res.ExecutionID
		req["executionId"], _ = json.Marshal(id)
	}
	body, _ := json.Marshal(req)
	rec := s.recordOf(e)
	s.emit(api.EventExecStarted, rec, map[string]any{"executionId": id})
	start := time.Now()
	w.Header().Set(api.ExecutionHeader, id)
	tw := &tailWriter{ResponseWriter: w}
	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	r2.Header.Set("Content-Type", "application/json")
	before := s.oomKills(e)
	e.agent.forward(tw, r2, http.MethodPost, wire.RouteExecute, "")
	s.metrics.exec.Observe(time.Since(start).Seconds())
	data := map[string]any{"executionId": id}
	var ev wire.Event
	if json.Unmarshal(tw.last(), &ev) == nil && ev.Type == "result" && ev.Result != nil {
		data["exitCode"], data["signal"], data["timedOut"] = ev.Result.ExitCode, ev.Result.Signal, ev.Result.TimedOut
		if ev.Result.Signal == "SIGKILL" && s.oomKills(e) > before {
			data["oomKilled"] = true
			s.emit(api.EventOOM, rec, map[string]any{"executionId": id})
		}
	}
	s.emit(api.EventExecFinished, rec, data)
}

func (s *Server) oomKills(e *entry) uint64 {
	n, _ := e.sb.OOMKills()
	return n
}

// tailWriter passes a stream through and keeps its last line (the result
// event), bounded.
type tailWriter struct {
	http.ResponseWriter
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if i := bytes.LastIndexByte(t.buf[:max(len(t.buf)-1, 0)], '\n'); i >= 0 {
		t.buf = t.buf[i+1:]
	}
	if len(t.buf) > 64<<10 {
		t.buf = t.buf[len(t.buf)-64<<10:]
	}
	return t.ResponseWriter.Write(p)
}

func (t *tailWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (t *tailWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (t *tailWriter) last() []byte { return bytes.TrimSpace(t.buf) }

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	e.agent.forward(w, withBody(r, wire.CancelRequest{ExecutionID: r.PathValue("eid")}), http.MethodPost, wire.RouteCancel, "")
}

func withBody(r *http.Request, v any) *http.Request {
	b, _ := json.Marshal(v)
	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	r2.Header.Set("Content-Type", "application/json")
	return r2
}

// handleFiles serves the file routes as raw streams through the agent:
// GET and PUT /files (Range, atomic replace), DELETE /files (remove),
// GET /stat, GET /dir (list) and POST /dir (mkdir), each with ?path=.
func (s *Server) handleFiles(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if q.Get("path") == "" {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "the path query parameter is required")
		return
	}
	feature, route, method := "raw-files", wire.RouteFiles, r.Method
	switch last := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]; {
	case last == "files" && r.Method == http.MethodPut:
		if r.ContentLength < 0 {
			writeError(w, http.StatusLengthRequired, api.CodeLengthRequired, "PUT needs a Content-Length")
			return
		}
	case last == "files" && r.Method == http.MethodDelete:
		feature, route, method = "fs-ops", wire.RouteRemove, http.MethodPost
	case last == "stat":
		feature, route = "fs-ops", wire.RouteStat
	case last == "dir" && r.Method == http.MethodGet:
		feature, route = "fs-ops", wire.RouteList
	case last == "dir":
		feature, route = "fs-ops", wire.RouteMkdir
	}
	if !hasFeature(e, feature) {
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, "this sandbox's agent lacks "+feature)
		return
	}
	query := url.Values{"path": {q.Get("path")}}
	if route == wire.RouteRemove && (q.Get("recursive") == "1" || q.Get("recursive") == "true") {
		query.Set("recursive", "1")
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	e.agent.forward(w, r, method, route, query.Encode())
}

func hasFeature(e *entry, f string) bool {
	for _, x := range e.sb.Features() {
		if x == f {
			return true
		}
	}
	return false
}

// handleAgent serves the sandbox's agent wire unchanged under
// /v1/sandboxes/{id}/agent/, behind the daemon's own credential.
func (s *Server) handleAgent(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	e.agent.forward(w, r, r.Method, "/"+r.PathValue("path"), r.URL.RawQuery)
}

func (s *Server) handlePolicy(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	var in api.Egress
	if !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &in) {
		return
	}
	p, err := s.toPolicy(in)
	if err == nil {
		err = e.sb.SetNetworkPolicy(r.Context(), p)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	s.mu.Lock()
	e.rec.Spec.Egress = &in
	rec := *e.rec
	s.mu.Unlock()
	if err := s.store.putSandbox(&rec); err != nil {
		writeErr(w, err)
		return
	}
	s.emit(api.EventPolicyChanged, &rec, map[string]any{"mode": string(p.Mode)})
	writeJSON(w, http.StatusOK, s.describe(e))
}

// handlePause serves pause and resume, where the sandbox's tier can.
func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	pause := strings.HasSuffix(r.URL.Path, "/pause")
	from, to, ev := api.StateRunning, api.StatePaused, api.EventPaused
	if !pause {
		from, to, ev = api.StatePaused, api.StateRunning, api.EventResumed
	}
	if !e.sb.CanPause() {
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, "this sandbox's tier cannot pause it")
		return
	}
	s.mu.Lock()
	state := e.rec.State
	s.mu.Unlock()
	if state == to {
		writeJSON(w, http.StatusOK, s.describe(e))
		return
	}
	if state != from {
		writeError(w, http.StatusConflict, api.CodeConflict, "the sandbox is "+state)
		return
	}
	var err error
	if pause {
		err = e.sb.Pause(r.Context())
	} else {
		err = e.sb.Resume(r.Context())
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	s.mu.Lock()
	if e.rec.State == from {
		e.rec.State = to
	}
	rec := *e.rec
	s.mu.Unlock()
	if err := s.store.putSandbox(&rec); err != nil {
		writeErr(w, err)
		return
	}
	s.emit(ev, &rec, nil)
	writeJSON(w, http.StatusOK, s.describe(e))
}

func (s *Server) recordOf(e *entry) *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := *e.rec
	return &r
}
