// Package conformance is the agent wire's conformance suite: one suite that
// every agent (cordon-agent on every tier, and the reference worker, to prove
// the suite encodes the reference's semantics) runs against itself.
//
// A test that covers a place where cordon is deliberately better than the
// reference (docs/protocol.md, "Where cordon differs") is skipped on the
// reference with the reason.
package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// Settings are agent settings by name without prefix (MAX_TRACKED_EXECUTIONS,
// CANCEL_GRACE_MS, ...). A Factory applies them with its agent's prefix.
type Settings map[string]string

// Target is one running agent under test.
type Target struct {
	// Endpoint reaches the agent, token included.
	Endpoint client.Endpoint
	// EnvPrefix is the agent's configuration prefix (CORDON_AGENT_ or
	// NAMZU_SANDBOX_), which commands must never see.
	EnvPrefix string
	// Reference marks the reference worker.
	Reference bool
	// Signal delivers sig to the agent process (nil if the tier cannot).
	Signal func(sig string) error
	// Exited is closed when the agent process has exited; ExitCode is
	// valid after that. Nil if the tier cannot observe the agent.
	Exited   <-chan struct{}
	ExitCode func() int
	// HostPIDGone reports whether a pid seen inside the sandbox is gone,
	// checked from outside (nil where the tier cannot map pids).
	HostPIDGone func(pid string) bool
	// ReadsAnywhere: the agent's read roots are the sandbox's whole view
	// (an isolating tier, where that view is the sandbox's own), so an
	// absolute path outside the workspace is readable.
	ReadsAnywhere bool
	// PassesTCP: the host shares the sandbox's kernel, so a tcp-connect
	// stream comes back as the connected socket itself (feature
	// "tcp-pass"), not relayed by the agent.
	PassesTCP bool
}

// Factory starts a fresh agent with the given settings; it registers its
// own cleanup with t.
type Factory func(t *testing.T, s Settings) *Target

// Run runs the whole suite.
func Run(t *testing.T, start Factory) {
	shared := start(t, Settings{})
	h := &harness{Target: shared, c: client.New(shared.Endpoint), hc: httpClient(shared.Endpoint)}
	t.Cleanup(h.c.Close)
	t.Run("Auth", func(t *testing.T) { testAuth(t, h) })
	t.Run("Execute", func(t *testing.T) { testExecute(t, h) })
	t.Run("Reserve", func(t *testing.T) { testReserve(t, h, start) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, h) })
	t.Run("Stdio", func(t *testing.T) { testStdio(t, h, start) })
	t.Run("StreamedStdin", func(t *testing.T) { testStreamedStdin(t, h) })
	t.Run("Heartbeat", func(t *testing.T) { testHeartbeat(t, h) })
	t.Run("ExitPolicy", func(t *testing.T) { testExitPolicy(t, h, start) })
	t.Run("Files", func(t *testing.T) { testFiles(t, h) })
	t.Run("RawFiles", func(t *testing.T) { testRawFiles(t, h) })
	t.Run("FSOps", func(t *testing.T) { testFSOps(t, h) })
	t.Run("Usage", func(t *testing.T) { testUsage(t, h) })
	t.Run("Sessions", func(t *testing.T) { testSessions(t, h) })
	t.Run("Terminals", func(t *testing.T) { testTerminals(t, h) })
	t.Run("SessionStdin", func(t *testing.T) { testSessionStdin(t, h) })
	t.Run("SessionTimeout", func(t *testing.T) { testSessionTimeout(t, h) })
	t.Run("TerminalNobodyReads", func(t *testing.T) { testTerminalNobodyReads(t, h, start) })
	t.Run("TCP", func(t *testing.T) { testTCP(t, h) })
	t.Run("BootIDHeader", func(t *testing.T) { testBootIDHeader(t, h) })
	t.Run("Watch", func(t *testing.T) { testWatch(t, h) })
	t.Run("RetainedOutput", func(t *testing.T) { testRetainedOutput(t, h) })
	t.Run("Quiesce", func(t *testing.T) { testQuiesce(t, start) })
	t.Run("Bodies", func(t *testing.T) { testBodies(t, start) })
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, start) })
}

type harness struct {
	*Target
	c  *client.Client
	hc *http.Client
}

func for2(t *testing.T, s Settings, start Factory) *harness {
	tg := start(t, s)
	h := &harness{Target: tg, c: client.New(tg.Endpoint), hc: httpClient(tg.Endpoint)}
	t.Cleanup(h.c.Close)
	return h
}

// improvement skips a test of a place where cordon is deliberately better
// than the reference worker.
func (h *harness) improvement(t *testing.T, why string) {
	t.Helper()
	if h.Reference {
		t.Skipf("cordon improvement over the reference: %s", why)
	}
}

func httpClient(ep client.Endpoint) *http.Client {
	return &http.Client{Transport: transport(ep)}
}

func baseURL(ep client.Endpoint) string {
	if ep.Network == "tcp" {
		return "http://" + ep.Address + ep.Prefix
	}
	return "http://agent" + ep.Prefix
}

// response is a raw answer from the agent.
type response struct {
	status int
	header http.Header
	body   []byte
	// reference: from the reference worker, whose refusals carry only
	// their code; cordon's also say why (a message).
	reference bool
}

func (r *response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

// raw sends one request; token "" sends no Authorization header.
func (h *harness) raw(t *testing.T, method, uri, token string, body []byte) *response {
	t.Helper()
	return h.rawWith(t, method, uri, token, body, nil)
}

// rawWith is raw with extra request headers.
func (h *harness) rawWith(t *testing.T, method, uri, token string, body []byte, hdr http.Header) *response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, baseURL(h.Endpoint)+uri, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, uri, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, uri, err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b, reference: h.Reference}
}

// post sends an authenticated JSON request.
func (h *harness) post(t *testing.T, route string, body any) *response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return h.raw(t, http.MethodPost, route, h.Endpoint.Token, b)
}

// wantError checks a JSON error answer's status and code.
func wantError(t *testing.T, r *response, status int, code string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	m := r.json(t)
	if code != "" && m["error"] != code {
		t.Fatalf("error %q, want %q (body %s)", m["error"], code, r.body)
	}
	if msg, _ := m["message"].(string); msg == "" && !r.reference && status >= 400 {
		t.Fatalf("a refusal that does not say why: %s", r.body)
	}
	return m
}

// run is the outcome of one /execute stream.
type run struct {
	status int
	events []wire.Event
	stdout string
	stderr string
	result *wire.Result
	errMsg string
	body   []byte // non-200 body
}

// execute posts /execute and collects the whole stream.
func (h *harness) execute(t *testing.T, req any) *run {
	t.Helper()
	r := h.executeNoFatal(req)
	if r.status == 0 || (r.status == http.StatusOK && r.errMsg != "" && r.result == nil && len(r.events) == 0) {
		t.Fatalf("execute: %s", r.errMsg)
	}
	return r
}

// addition skips t against the reference worker, which has none of what
// cordon adds (lacks says what it has not), and fails it against an agent
// that does not advertise every one of features.
func (h *harness) addition(t *testing.T, lacks string, features ...string) {
	t.Helper()
	for _, f := range features {
		if !h.c.HasFeature(context.Background(), f) {
			if h.Reference {
				t.Skip("cordon addition: the reference worker has no " + lacks)
			}
			t.Fatalf("cordon-agent does not advertise %s", f)
		}
	}
}

// sh runs a shell command and fails the test unless it exits 0; it returns
// stdout.
func (h *harness) sh(t *testing.T, script string) string {
	t.Helper()
	r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", script}})
	if r.status != 200 || r.result == nil || r.result.ExitCode != 0 {
		t.Fatalf("sh -c %q: status %d result %+v stderr %q err %q", script, r.status, r.result, r.stderr, r.errMsg)
	}
	return r.stdout
}

func (h *harness) reserve(t *testing.T) string {
	t.Helper()
	r := h.post(t, wire.RouteReserve, map[string]any{})
	if r.status != http.StatusCreated {
		t.Fatalf("reserve: %d %s", r.status, r.body)
	}
	return r.json(t)["executionId"].(string)
}

// alive reports whether pid exists, asked from inside the sandbox.
func (h *harness) alive(t *testing.T, pid string) bool {
	t.Helper()
	out := h.sh(t, fmt.Sprintf("if kill -0 %s 2>/dev/null; then echo yes; else echo no; fi", pid))
	return strings.TrimSpace(out) == "yes"
}

// eventually polls cond for up to d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// executeNoFatal is execute for goroutines other than the test's: failures
// come back as a run with status 0 and the error in errMsg.
func (h *harness) executeNoFatal(req any) *run {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, baseURL(h.Endpoint)+wire.RouteExecute, bytes.NewReader(b))
	hr.Header.Set("Authorization", "Bearer "+h.Endpoint.Token)
	resp, err := h.hc.Do(hr)
	if err != nil {
		return &run{errMsg: err.Error()}
	}
	defer resp.Body.Close()
	r := &run{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		r.body, _ = io.ReadAll(resp.Body)
		return r
	}
	if err := readStream(resp.Body, r); err != nil {
		r.errMsg = "reading stream: " + err.Error()
		r.events = nil
	}
	return r
}

func readStream(body io.Reader, r *run) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var ev wire.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("malformed event %q: %v", sc.Bytes(), err)
		}
		r.events = append(r.events, ev)
		switch ev.Type {
		case wire.EventStdout:
			r.stdout += ev.Data
		case wire.EventStderr:
			r.stderr += ev.Data
		case wire.EventResult:
			r.result = ev.Result
		case wire.EventError:
			r.errMsg = ev.Error
		}
	}
	return sc.Err()
}

func clientOpts(script string) client.ExecOptions {
	return client.ExecOptions{Args: []string{"-c", script}}
}
