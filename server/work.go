package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
)

// agentProxy forwards requests to one sandbox's agent, swapping the
// caller's daemon credential for the agent's own token. It shares the
// sandbox client's connections (a pooled sandbox's warm-up command has
// already opened one), and follows the sandbox to a new client when a
// suspended one resumes on a new agent.
type agentProxy struct{ client func() *client.Client }

func newAgentProxy(c func() *client.Client) *agentProxy { return &agentProxy{client: c} }

// forward sends r to the agent with its token; see send.
func (p *agentProxy) forward(w http.ResponseWriter, r *http.Request, method, path, query string) {
	p.send(w, r, method, path, query, true, nil)
}

// send sends r to the agent as method path?query and streams the answer
// back unchanged (flushing as it arrives, for NDJSON streams).
func (p *agentProxy) send(w http.ResponseWriter, r *http.Request, method, path, query string, withToken bool, modify func(*http.Response) error) {
	// A body the caller sent broken (its chunks malformed, cut off) is
	// the caller's error, not the agent's.
	body := watchBody(r.Body)
	if body != nil {
		r.Body = body
	}
	c := p.client()
	ep := c.Endpoint()
	rp := &httputil.ReverseProxy{
		Transport:     c.Transport(),
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Method = method
			pr.Out.URL = &url.URL{Scheme: "http", Host: "agent", Path: path, RawQuery: query}
			pr.Out.Host = "agent"
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
			if withToken && ep.Token != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+ep.Token)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("WWW-Authenticate")
			if modify != nil {
				return modify(resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			if berr := body.failed(); berr != nil {
				writeError(w, http.StatusBadRequest, api.CodeInvalid, "the request's body: "+berr.Error())
				return
			}
			writeError(w, http.StatusBadGateway, api.CodeAgent, "the sandbox's agent did not answer: "+err.Error())
		},
	}
	// The agent may answer while the request body is still being sent
	// (and the body's final read may come after the answer started). By
	// default net/http refuses reads of a request body once the response
	// has begun, which made the transport drop the agent's connection mid
	// answer.
	_ = http.NewResponseController(w).EnableFullDuplex()
	rp.ServeHTTP(w, r)
}

// bodyWatch is a request body that keeps the first error reading it met
// (io.EOF aside), for the caller to tell a broken body from an agent that
// did not answer.
type bodyWatch struct {
	io.ReadCloser
	mu  sync.Mutex
	err error
}

// watchBody watches rc; nil for no body.
func watchBody(rc io.ReadCloser) *bodyWatch {
	if rc == nil || rc == http.NoBody {
		return nil
	}
	return &bodyWatch{ReadCloser: rc}
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// failed is the first error reading the body met, if any.
func (b *bodyWatch) failed() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
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
	if req == nil { // the body was null
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "the body must be a JSON object")
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
	}
	rec := s.recordOf(e)
	start := time.Now()
	before := s.oomKills(e)
	// The daemon holds the command's deadline too (sandbox.HostGrace past
	// its timeout): an agent that neither ends the command nor reports it
	// (frozen, or dead) has its sandbox torn down, and the caller is told.
	timeout := e.sb.ExecTimeout(sandbox.ExecOptions{Timeout: requestedTimeout(req)})
	var expired atomic.Bool
	// The stream is relayed event by event, not through a reverse proxy:
	// the finished event must be published before the caller sees the
	// result, and a caller that goes away must not end the relay, which
	// reads on until the command's result so that its end is recorded.
	relayCtx, cancelRelay := context.WithCancel(context.WithoutCancel(r.Context()))
	tornDown := make(chan error, 1)
	deadline := time.AfterFunc(timeout+e.sb.HostGrace(), func() {
		// The relay stops first: what a thawed agent says as it is torn
		// down is not the command's end.
		expired.Store(true)
		cancelRelay()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := s.destroy(ctx, e, "deadline")
		if err != nil {
			s.log.Warn("teardown at the host's deadline failed; the reaper retries", "sandbox", rec.ID, "err", err)
		}
		tornDown <- err
	})
	defer deadline.Stop()
	// deadlineErr is said once the teardown is over.
	deadlineErr := func() string {
		err := <-tornDown
		tornDown <- err
		return (&sandbox.DeadlineError{Timeout: timeout, Grace: e.sb.HostGrace(), Teardown: err}).Error()
	}
	// post sends the command; an answer other than 200 is read whole, kept
	// for the caller, and returned as the agent's error.
	var resp *http.Response
	var refusal []byte
	post := func(id string, ask *client.Ask) error {
		req["executionId"], _ = json.Marshal(id)
		body, _ := json.Marshal(req)
		var err error
		resp, refusal = nil, nil
		if resp, err = e.agent.post(relayCtx, wire.RouteExecute, body, ask.Header()); err != nil {
			return err
		}
		if resp.StatusCode == http.StatusOK {
			ask.Answer(resp.Header)
			return nil
		}
		refusal, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return client.AnswerError(resp.StatusCode, refusal)
	}
	var err error
	if id != "" {
		err = post(id, nil)
	} else if id, err = e.sb.Client().RunLeased(r.Context(), post); id == "" {
		// No reservation could be taken.
		cancelRelay()
		writeErr(w, err)
		return
	}
	if resp == nil {
		cancelRelay()
		if expired.Load() {
			writeError(w, http.StatusGatewayTimeout, api.CodeDeadline, deadlineErr())
			return
		}
		writeError(w, http.StatusBadGateway, api.CodeAgent, "the sandbox's agent did not answer: "+err.Error())
		return
	}
	s.emit(api.EventExecStarted, rec, map[string]any{"executionId": id})
	w.Header().Set(api.ExecutionHeader, id)
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	if resp.StatusCode != http.StatusOK {
		cancelRelay()
		_, _ = w.Write(refusal)
		return
	}
	_ = rc.Flush()
	gone := false
	data := map[string]any{"executionId": id}
	err = relayEvents(resp.Body, func(line []byte, ev *wire.Event) {
		if ev != nil && (ev.Type == wire.EventResult || ev.Type == wire.EventError) {
			s.metrics.exec.Observe(time.Since(start).Seconds())
			if ev.Result != nil {
				data["exitCode"], data["signal"], data["timedOut"] = ev.Result.ExitCode, ev.Result.Signal, ev.Result.TimedOut
				if after := s.oomKills(e); after > before {
					// The caller's result says so too, whichever process
					// the kernel killed.
					ev.Result.OOMKills = int64(after - before)
					line = wire.AppendResultEvent(nil, ev.Result)
					data["oomKills"] = ev.Result.OOMKills
					if ev.Result.Signal == "SIGKILL" {
						data["oomKilled"] = true
					}
					s.emit(api.EventOOM, rec, map[string]any{"executionId": id, "kills": ev.Result.OOMKills})
				}
			} else {
				data["error"] = ev.Error
			}
			s.emit(api.EventExecFinished, rec, data)
		}
		if gone {
			return
		}
		if _, err := w.Write(line); err != nil || rc.Flush() != nil {
			gone = true
		}
	})
	if err != nil {
		resp.Body.Close()
		cancelRelay()
		if expired.Load() {
			// The caller is told why its stream ends, as the stream's
			// error event.
			data["error"] = deadlineErr()
			s.emit(api.EventExecFinished, rec, data)
			line, _ := json.Marshal(wire.Event{Type: wire.EventError, Error: deadlineErr()})
			if !gone {
				_, _ = w.Write(append(line, '\n'))
				_ = rc.Flush()
			}
			return
		}
		data["error"] = "the agent's stream broke: " + err.Error()
		s.emit(api.EventExecFinished, rec, data)
		// A cut-off stream must not look whole to the caller.
		panic(http.ErrAbortHandler)
	}
	client.Release(resp.Body, cancelRelay)
}

// requestedTimeout is an exec body's timeoutMs, 0 when it names none (or
// none the agent would take: the agent refuses it then).
func requestedTimeout(req map[string]json.RawMessage) time.Duration {
	var ms float64
	if raw, ok := req["timeoutMs"]; !ok || json.Unmarshal(raw, &ms) != nil || !(ms > 0) || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// relayEvents reads an NDJSON stream line by line (each at most
// client.MaxEventBytes) and hands fn each line with its parsed event (nil
// if it does not parse), until the stream ends after a result or error.
func relayEvents(r io.Reader, fn func(line []byte, ev *wire.Event)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > client.MaxEventBytes {
			return fmt.Errorf("an event exceeds %d bytes", client.MaxEventBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 0 {
			var ev wire.Event
			evp := &ev
			if client.DecodeEvent(bytes.TrimSuffix(line, []byte("\n")), &ev) != nil {
				evp = nil
			}
			fn(line, evp)
			if evp != nil && (ev.Type == wire.EventResult || ev.Type == wire.EventError) {
				return nil
			}
		}
		line = line[:0]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
}

// post sends a JSON body to an agent route with the token.
func (p *agentProxy) post(ctx context.Context, route string, body []byte, h http.Header) (*http.Response, error) {
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	return p.request(ctx, http.MethodPost, route, bytes.NewReader(body), int64(len(body)), h)
}

// request sends method route with body (of length bytes; -1: chunked, its
// length unknown) and the headers h to the agent, with the token.
func (p *agentProxy) request(ctx context.Context, method, route string, body io.Reader, length int64, h http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+route, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = length
	if length == 0 {
		// Empty, not of unknown length (which net/http would send chunked).
		req.Body = http.NoBody
	}
	for k, v := range h {
		req.Header[k] = v
	}
	c := p.client()
	if tok := c.Endpoint().Token; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return c.Transport().RoundTrip(req)
}

func (s *Server) oomKills(e *entry) uint64 {
	n, _ := e.sb.OOMKills()
	return n
}

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
// GET /stat, GET /dir (list), POST /dir (mkdir) and POST /rename (&to=),
// each with ?path=.
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
	feature, route, method, modify := "raw-files", wire.RouteFiles, r.Method, fileRefusal
	if r.Method == http.MethodHead {
		// The agent answers GET; the server sends a HEAD no body.
		method = http.MethodGet
	}
	switch last := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]; {
	case last == "files" && r.Method == http.MethodHead:
		// The file's headers without its bytes: from the agent's stat.
		feature, route, modify = "fs-ops", wire.RouteStat, headOfFile
	case last == "files" && r.Method == http.MethodPut:
		if r.ContentLength < 0 && !hasFeature(e, "files-chunked") {
			writeError(w, http.StatusLengthRequired, api.CodeLengthRequired, "this sandbox's agent needs a Content-Length on PUT (it lacks files-chunked)")
			return
		}
	case last == "files" && r.Method == http.MethodDelete:
		feature, route, method = "fs-ops", wire.RouteRemove, http.MethodPost
	case last == "stat":
		feature, route = "fs-ops", wire.RouteStat
	case last == "dir" && method == http.MethodGet:
		feature, route = "fs-ops", wire.RouteList
	case last == "dir":
		feature, route = "fs-ops", wire.RouteMkdir
	case last == "rename":
		feature, route = "fs-rename", wire.RouteRename
		if q.Get("to") == "" {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "the to query parameter, where to move it, is required")
			return
		}
	}
	if !hasFeature(e, feature) {
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, "this sandbox's agent lacks "+feature)
		return
	}
	query := url.Values{"path": {q.Get("path")}}
	if m := q.Get("mode"); m != "" && route == wire.RouteFiles && method == http.MethodPut {
		query.Set("mode", m)
	}
	if route == wire.RouteRemove && (q.Get("recursive") == "1" || q.Get("recursive") == "true") {
		query.Set("recursive", "1")
	}
	if route == wire.RouteRename {
		query.Set("to", q.Get("to"))
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	e.agent.send(w, r, method, route, query.Encode(), true, modify)
}

// headOfFile turns the agent's stat of a path into the answer to a HEAD of
// the file: a GET's headers, or its refusal where a GET would be refused.
func headOfFile(resp *http.Response) error {
	if err := fileRefusal(resp); err != nil || resp.StatusCode >= 400 {
		return err
	}
	var st wire.FileInfo
	err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&st)
	resp.Body.Close()
	if err != nil {
		return err
	}
	resp.Header = http.Header{}
	resp.Body, resp.ContentLength = http.NoBody, 0
	if st.Type != "file" {
		resp.StatusCode, resp.Status = http.StatusBadRequest, ""
		resp.Header.Set("Content-Type", "application/json")
		return nil
	}
	resp.Header.Set("Content-Type", "application/octet-stream")
	resp.Header.Set("Accept-Ranges", "bytes")
	resp.Header.Set("Content-Length", strconv.FormatInt(st.Size, 10))
	return nil
}

// fileRefusal rewrites the agent's file refusals ({"ok":false,"error":
// SENTENCE}) into the API's error shape, so every refusal of the REST API
// reads the same.
func fileRefusal(resp *http.Response) error {
	if resp.StatusCode < 400 {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil {
		return err
	}
	var fe wire.FileError
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &fe) == nil && fe.Error != "" {
		msg = fe.Error
	}
	code := map[int]string{
		http.StatusNotFound: api.CodeNotFound, http.StatusRequestEntityTooLarge: api.CodeTooLarge,
		http.StatusLengthRequired: api.CodeLengthRequired, http.StatusRequestedRangeNotSatisfiable: api.CodeRange,
		http.StatusUnauthorized: api.CodeAgent, http.StatusServiceUnavailable: api.CodeAgent,
		http.StatusForbidden: api.CodeForbidden, http.StatusInsufficientStorage: api.CodeNoSpace,
	}[resp.StatusCode]
	if code == "" {
		code = api.CodeFileError
	}
	out, _ := json.Marshal(api.Error{Code: code, Message: msg})
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", fmt.Sprint(len(out)))
	resp.Header.Set("Content-Type", "application/json")
	return nil
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
	s.inAgent(w, r, func(e *entry) {
		if port, ok := plainTCPUpgrade(r); ok {
			s.spliceTCP(w, r, e, port)
			return
		}
		if r.Method == http.MethodPost && "/"+r.PathValue("path") == wire.RouteSessions {
			s.forwardSessionStart(w, r, e)
			return
		}
		e.agent.forward(w, r, r.Method, "/"+r.PathValue("path"), r.URL.RawQuery)
	})
}

// plainTCPUpgrade is the port of a tcp-connect request on the agent
// passthrough (GET tcp?port=N, Upgrade: cordon-tcp) that the daemon can
// open itself; anything else (another host, a bad port) goes to the agent
// as it is, for the agent's own answer.
func plainTCPUpgrade(r *http.Request) (int, bool) {
	if r.Method != http.MethodGet || "/"+r.PathValue("path") != wire.RouteTCP || !strings.EqualFold(r.Header.Get("Upgrade"), wire.UpgradeTCP) {
		return 0, false
	}
	q := r.URL.Query()
	for k := range q {
		if k != "port" && k != "pass" {
			return 0, false
		}
	}
	port, err := strconv.Atoi(q.Get("port"))
	if err != nil || port < 1 || port > 65535 {
		return 0, false
	}
	return port, true
}

// spliceTCP serves a tcp-connect through the passthrough with the
// daemon's own connection to the port: where the tier shares the host's
// kernel the agent hands that socket over (feature "tcp-pass"), so the
// bytes cross one relay (this one) rather than two. The caller sees the
// agent's wire: the same 101, the same refusals.
func (s *Server) spliceTCP(w http.ResponseWriter, r *http.Request, e *entry, port int) {
	target, err := e.sb.Client().DialTCP(r.Context(), port)
	if err != nil {
		var ce *client.Error
		if errors.As(err, &ce) {
			writeJSON(w, ce.Status, wire.ErrorBody{Error: ce.Code, Message: ce.Message})
			return
		}
		writeError(w, http.StatusBadGateway, api.CodeAgent, "the sandbox's agent did not answer: "+err.Error())
		return
	}
	defer target.Close()
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "this connection cannot be taken over: "+err.Error())
		return
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Time{})
	if _, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+wire.UpgradeTCP+"\r\n\r\n"); err != nil {
		return
	}
	// A passed socket outlives the agent: the sandbox's end goes with
	// its teardown, and so does this stream.
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-e.sb.Exited():
			target.Close()
			nc.Close()
		case <-finished:
		}
	}()
	client.Splice(client.Resumed(nc, brw.Reader), target)
}

// agentUnauthenticated answers a request without a valid daemon key on
// the agent passthrough exactly as an agent would: its readiness probe
// (GET healthz, nothing after it) is open and forwarded without the token,
// so it says only that the agent is up; everything else is 401 with the
// agent's own body. Sandbox ids are 64 random bits, so the open probe is no
// way to find one.
func (s *Server) agentUnauthenticated(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.PathValue("path") == "healthz" && strings.HasSuffix(r.RequestURI, "/agent/healthz") {
		s.mu.Lock()
		e := s.live[r.PathValue("id")]
		s.mu.Unlock()
		if e != nil && e.sb != nil {
			e.agent.send(w, r, http.MethodGet, wire.RouteHealthz, "", false, nil)
			return
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="cordon"`)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"error":"` + wire.CodeUnauthorized + `"}`))
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
		err = tenantEgress(callerOf(r), &in)
	}
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

// handlePause serves pause and resume, where the sandbox's tier can (a
// suspended sandbox resumes as suspension says).
func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	e.touch()
	pause := strings.HasSuffix(r.URL.Path, "/pause")
	s.mu.Lock()
	suspended := e.rec.State == api.StateSuspended
	s.mu.Unlock()
	if !pause && suspended {
		s.suspension(w, r, e, false)
		return
	}
	if !e.sb.CanPause() {
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, "this sandbox's tier cannot pause it")
		return
	}
	if pause {
		s.transition(w, e, api.StateRunning, api.StatePaused, api.EventPaused, func() error { return e.sb.Pause(r.Context()) })
	} else {
		s.transition(w, e, api.StatePaused, api.StateRunning, api.EventResumed, func() error {
			if err := e.sb.Resume(r.Context()); err != nil {
				return err
			}
			if e.deadlinesUnread.CompareAndSwap(true, false) {
				// Adopted paused: its agent could not say then which of
				// its sessions have timeouts.
				s.holdSessionDeadlines([]*entry{e})
			}
			return nil
		})
	}
}

// handleSuspend suspends a sandbox created with a persistent workspace.
func (s *Server) handleSuspend(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	e.touch()
	s.suspension(w, r, e, true)
}

// suspension suspends a running sandbox, or resumes a suspended one.
func (s *Server) suspension(w http.ResponseWriter, r *http.Request, e *entry, suspend bool) {
	if !e.sb.CanSuspend() {
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, "this sandbox cannot be suspended: it needs spec.persistentWorkspace at create, on a tier that keeps one (process, container, gvisor on a daemon as root; kubernetes)")
		return
	}
	if suspend {
		s.transition(w, e, api.StateRunning, api.StateSuspended, api.EventSuspended, func() error { return e.sb.Suspend(r.Context()) })
	} else {
		s.transition(w, e, api.StateSuspended, api.StateRunning, api.EventResumed, func() error {
			if err := e.sb.Resume(r.Context()); err != nil {
				return err
			}
			e.resumed()
			return nil
		})
	}
}

// transition takes a sandbox in state from to state to by do (one
// already in to is answered as it is), and records it with what a
// restarted daemon needs to take it back as it now is (a resumed
// suspension's agent has a new boot identity).
func (s *Server) transition(w http.ResponseWriter, e *entry, from, to, ev string, do func() error) {
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
	if err := do(); err != nil {
		writeErr(w, err)
		return
	}
	ad, aerr := e.sb.Persist()
	s.mu.Lock()
	if e.rec.State == from {
		e.rec.State = to
	}
	if aerr == nil {
		e.rec.Adoption = ad
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
