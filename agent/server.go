//go:build linux

// Package agent is cordon-agent: the process that runs inside every sandbox,
// on every tier, and serves the agent wire (protocol version 2) to the host.
// It runs commands, reads and writes files inside its roots, and owns every
// process it starts until that process is confirmed gone.
package agent

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// Features are cordon's additions to protocol version 2, announced in
// GET /healthz so that a host can tell what this agent offers.
var Features = []string{
	// Every command's orphans are reaped and a strict command's leftover
	// group is stopped instead of retiring the agent.
	"group-reap",
	// write-file lands through a temporary sibling, fsync and rename.
	"write-file-atomic",
	// 127.0.0.1:3128 inside bridges to the host's egress proxy when one
	// is configured (CORDON_AGENT_EGRESS_SOCKET).
	"egress-bridge",
	// GET and PUT /files?path=P carry files as raw bodies: Range on GET,
	// an atomic replace on PUT.
	"raw-files",
	// PUT /files also takes a chunked body, whose length is not known
	// before it ends (a stream, a part of an uploaded form).
	"files-chunked",
	// GET /healthz tells an authenticated caller the agent's boot id and
	// what it is doing (running executions, requests, idle time).
	"activity",
	// stat, list, mkdir and remove under the path jail (/fs/...).
	"fs-ops",
	// POST /fs/rename moves a path to another under the write roots.
	"fs-rename",
	// GET /usage counts what the commands use: CPU time, tasks, the
	// writable space (and memory, where the agent counts it).
	"usage",
	// A session without a terminal may have a standard input of its own
	// (stdin: true), written and closed through /sessions/ID/input.
	"session-stdin",
	// A session may have a timeout (timeoutMs), after which its process
	// group is ended and it reports timedOut.
	"session-timeout",
	// A reservation marked as a host's spare (Cordon-Lease: spare) yields
	// its slot to another reservation when the agent is at capacity.
	"spare-leases",
	// /execute asked with Cordon-Lease: next answers with the next spare
	// reservation in Cordon-Next-Lease.
	"next-lease",
	// /execute takes stdin as base64 (stdinEncoding: "base64"), so that
	// bytes which are not UTF-8 reach the command as they are.
	"stdin-base64",
	// /execute sends output as base64 of the exact bytes on request
	// (outputEncoding: "base64").
	"output-base64",
	// /executions/write with end: true closes a stdio command's standard
	// input, so input can stream in and then end (wire.StdioWriteRequest).
	"stdin-end",
	// A strict command ends with its leader: once the leader exited and
	// its output drained for wire.LeaderDrain, what it left running is
	// stopped and the result says so (leftoversStopped).
	"leader-exit",
	// Programs of the sandbox's own, detached from any connection, with
	// their output retained for any reader from any offset held
	// (/sessions; wire.RouteSessions).
	"sessions",
	// POST /quiesce stops everything the agent runs, orphans included,
	// and it serves on; POST /flush syncs the writable file systems
	// (wire.RouteQuiesce). SIGTERM does both before the agent exits.
	"quiesce",
	"flush",
	// /execute with Cordon-Heartbeat: MS sends a heartbeat line every MS
	// while the stream is otherwise silent (wire.HeartbeatHeader).
	"stream-heartbeat",
	// /execute with retainOutput keeps a command's output for GET
	// /executions/ID/output, from any offset, from any connection.
	"retained-output",
	// GET /watch?path=P[&recursive=1] streams a directory's changes
	// (wire.RouteWatch).
	"watch",
	// Every authenticated answer carries the agent's boot id in the
	// Cordon-Boot-Id header (wire.BootIDHeader).
	"boot-id-header",
	// GET /tcp?port=N with Upgrade: cordon-tcp is a byte stream to a port
	// on the sandbox's own loopback (wire.RouteTCP).
	"tcp-connect",
	// GET /tcp with &pass=1 hands the connected socket to a host sharing
	// the sandbox's kernel, with the 101 answer (wire.PassHeader).
	"tcp-pass",
	// A session may run on a terminal of its own (tty: true), typed into
	// through /sessions/ID/input and sized through /sessions/ID/resize.
	"terminals",
}

// Server serves the agent wire. Build one with New; it is an httpd.Handler.
type Server struct {
	cfg         Config
	log         *slog.Logger
	env         []string // base environment for commands
	tokenDigest []byte   // nil when unauthenticated
	reaper      *reaper
	devNull     *os.File

	mu         sync.Mutex
	executions map[string]*execution
	sessions   map[string]*session
	running    map[*execution]struct{} // every live execution, tracked or not
	handoffs   map[int]struct{}        // process groups computer-lifetime commands handed over
	active     int                     // activity leases held
	idleSince  time.Time               // when active last fell to zero
	bootID     string
	idleTimer  *time.Timer
	retiring   bool
	quiescing  bool // a quiesce runs: nothing starts

	// exit ends the process; tests and Run replace it.
	exit     func(code int)
	onRetire func()
	// commandThread is Options.CommandThreadID, for the ready record.
	commandThread int
}

// New builds a server from a validated configuration. env is the agent's own
// environment, from which commands inherit everything but CORDON_AGENT_*.
func New(cfg Config, env []string, log *slog.Logger, reapAll bool) (*Server, error) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		log:        log,
		env:        childEnvironment(env),
		reaper:     newReaper(reapAll),
		devNull:    devNull,
		executions: map[string]*execution{},
		sessions:   map[string]*session{},
		running:    map[*execution]struct{}{},
		handoffs:   map[int]struct{}{},
		exit:       os.Exit,
		idleSince:  time.Now(),
		bootID:     newBootID(),
	}
	if cfg.Token != "" {
		d := sha256.Sum256([]byte(cfg.Token))
		s.tokenDigest = d[:]
	}
	return s, nil
}

// bearerToken is the credential of an Authorization value, matched as
// the reference does (/^Bearer +(.+)$/i): the scheme in any case, one or
// more spaces, then a token of one line.
func bearerToken(h string) (string, bool) {
	const scheme = "bearer"
	if len(h) < len(scheme)+2 || !strings.EqualFold(h[:len(scheme)], scheme) || h[len(scheme)] != ' ' {
		return "", false
	}
	rest := h[len(scheme):]
	t := strings.TrimLeft(rest, " ")
	if t == "" && len(rest) >= 2 {
		t = " " // all spaces: the pattern's greedy run gives the last one up
	}
	if t == "" || strings.ContainsRune(t, '\n') {
		return "", false
	}
	return t, true
}

func (s *Server) authorized(r *httpd.Request) bool {
	if s.tokenDigest == nil {
		return true
	}
	tok, ok := bearerToken(jsTrim(latin1(r.Header.Get("Authorization"))))
	if !ok {
		return false
	}
	d := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(d[:], s.tokenDigest) == 1
}

// latin1 reads header bytes the way an HTTP peer sends them, one byte per
// character, so a token with characters in U+0080-U+00FF matches.
func latin1(b string) string {
	for i := 0; i < len(b); i++ {
		if b[i] >= 0x80 {
			r := make([]rune, len(b))
			for j := 0; j < len(b); j++ {
				r[j] = rune(b[j])
			}
			return string(r)
		}
	}
	return b
}

// ServeHTTP is the router. The credential gate runs first, ahead of the
// retiring check and every route, so an unauthenticated caller learns
// nothing about which routes exist. GET /healthz, matched on the whole URI,
// is the one exemption: it is the host's readiness probe.
func (s *Server) ServeHTTP(w httpd.ResponseWriter, r *httpd.Request) {
	healthz := r.Method == httpd.MethodGet && r.RequestURI == wire.RouteHealthz
	if !healthz && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="cordon-agent"`)
		writeJSON(w, httpd.StatusUnauthorized, wire.ErrorBody{Error: wire.CodeUnauthorized})
		return
	}
	s.mu.Lock()
	retiring := s.retiring
	s.mu.Unlock()
	if retiring {
		writeJSON(w, httpd.StatusServiceUnavailable, wire.ErrorBody{Error: wire.CodeWorkerRetiring})
		return
	}
	if healthz {
		writeJSON(w, httpd.StatusOK, s.health(r))
		return
	}
	// Authenticated from here: every answer names this agent's start.
	w.Header().Set(wire.BootIDHeader, s.bootID)
	var h func(httpd.ResponseWriter, *httpd.Request)
	if r.Method == httpd.MethodPost {
		switch r.RequestURI {
		case wire.RouteExecute:
			h = s.handleExecute
		case wire.RouteReserve:
			h = s.handleReserve
		case wire.RouteCancel:
			h = s.handleCancel
		case wire.RouteStdioWrite:
			h = s.handleStdioWrite
		case wire.RouteReadFile:
			h = s.handleReadFile
		case wire.RouteWriteFile:
			h = s.handleWriteFile
		case wire.RouteQuiesce:
			h = s.handleQuiesce
		case wire.RouteFlush:
			h = s.handleFlush
		}
	}
	if r.URL.RawQuery != "" && r.RequestURI == r.URL.RequestURI() {
		switch {
		case r.Method == httpd.MethodGet && r.URL.Path == wire.RouteStat:
			h = s.handleStat
		case r.Method == httpd.MethodGet && r.URL.Path == wire.RouteList:
			h = s.handleList
		case r.Method == httpd.MethodGet && r.URL.Path == wire.RouteWatch:
			h = s.handleWatch
		case r.Method == httpd.MethodPost && r.URL.Path == wire.RouteMkdir:
			h = s.handleMkdir
		case r.Method == httpd.MethodPost && r.URL.Path == wire.RouteRemove:
			h = s.handleRemove
		case r.Method == httpd.MethodPost && r.URL.Path == wire.RouteRename:
			h = s.handleRename
		}
	}
	if r.Method == httpd.MethodGet && strings.HasPrefix(r.URL.Path, wire.RouteExecutions) && strings.HasSuffix(r.URL.Path, "/output") && r.RequestURI == r.URL.RequestURI() {
		h = s.executionOutput
	}
	if r.Method == httpd.MethodGet && r.RequestURI == wire.RouteUsage {
		h = s.handleUsage
	}
	if r.Method == httpd.MethodGet && r.URL.Path == wire.RouteTCP && r.RequestURI == r.URL.RequestURI() {
		h = s.handleTCP
	}
	if p := r.URL.Path; (p == wire.RouteSessions || strings.HasPrefix(p, wire.RouteSessions+"/")) && r.RequestURI == r.URL.RequestURI() {
		h = s.handleSessions
	}
	// cordon's raw file route takes its path in the query.
	if r.URL.Path == wire.RouteFiles && r.URL.RawQuery != "" && r.RequestURI == r.URL.RequestURI() {
		switch r.Method {
		case httpd.MethodGet:
			h = s.handleGetFile
		case httpd.MethodPut:
			h = s.handlePutFile
		}
	}
	if h == nil {
		writeJSON(w, httpd.StatusNotFound, wire.ErrorBody{Error: wire.CodeNotFound})
		return
	}
	// Counting what the commands use is looking at the sandbox, not work
	// in it: a dashboard that polls must not keep an idle sandbox alive.
	if r.RequestURI != wire.RouteUsage {
		release := s.acquireActivity()
		defer release()
	}
	defer func() {
		// A handler bug answers 500 and leaves the agent serving.
		if p := recover(); p != nil {
			if p == httpd.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("handler panic", "route", r.RequestURI, "panic", p)
			writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeInternal, Message: fmt.Sprint(p)})
		}
	}()
	h(w, r)
}

func writeJSON(w httpd.ResponseWriter, status int, v any) {
	switch e := v.(type) {
	case wire.ErrorBody:
		v = e.Explain()
	case *wire.ErrorBody:
		v = e.Explain()
	}
	b, err := json.Marshal(v)
	if err != nil {
		status, b = httpd.StatusInternalServerError, []byte(`{"error":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// readBody reads a JSON object body of at most MaxBodyBytes. A declared
// length over the cap is refused before a byte is read; an undeclared one is
// cut off at the cap. An empty body is {}.
func (s *Server) readBody(r *httpd.Request, dst any) error {
	b, err := s.bodyBytes(r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("request body is not a JSON object: %v", err)
	}
	return nil
}

// bodyBytes reads a JSON request's body whole, within MaxBodyBytes; an
// empty one reads as {}.
func (s *Server) bodyBytes(r *httpd.Request) ([]byte, error) {
	b, err := s.rawBody(r)
	if err == nil && len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	return b, err
}

// rawBody reads a request's body whole and as it is, within MaxBodyBytes.
func (s *Server) rawBody(r *httpd.Request) ([]byte, error) {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, fmt.Errorf("request body exceeds %d bytes", limit)
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + 1)
	}
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1)); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("request body exceeds %d bytes", limit)
	}
	return b, nil
}

// acquireActivity takes an activity lease: while any is held the idle timer
// is disarmed. The returned release is idempotent.
func (s *Server) acquireActivity() func() {
	s.mu.Lock()
	s.active++
	if s.idleTimer != nil {
		s.idleTimer.Stop()
		s.idleTimer = nil
	}
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.active--
			if s.active == 0 {
				s.idleSince = time.Now()
			}
			s.armIdleLocked()
			s.mu.Unlock()
		})
	}
}

// health is the healthz body; the boot id and activity only for a caller
// that presented the token (healthz itself is open, as the readiness probe).
func (s *Server) health(r *httpd.Request) wire.Health {
	if s.tokenDigest == nil || !s.authorized(r) {
		return wire.Health{OK: true, ProtocolVersion: wire.ProtocolVersion, Features: Features}
	}
	return s.hostHealth()
}

// readyRecord is the encoded wire.ReadyRecord for a host that started this
// agent: its health as the host would be told it, and a spare reservation.
func (s *Server) readyRecord() []byte {
	rec := wire.ReadyRecord{Health: s.hostHealth(), CommandThread: s.commandThread}
	if res, ok := s.reserve(true); ok {
		rec.Spare = &res
	}
	return wire.AppendReadyRecord(nil, &rec)
}

// hostHealth is the health an authenticated caller is told.
func (s *Server) hostHealth() wire.Health {
	h := wire.Health{OK: true, ProtocolVersion: wire.ProtocolVersion, Features: Features}
	s.mu.Lock()
	for pg := range s.handoffs {
		// A handed-over group counts until its last process is gone.
		if !groupAlive(pg) {
			delete(s.handoffs, pg)
			s.idleSince = time.Now()
		}
	}
	a := wire.Activity{Running: len(s.running) + len(s.handoffs), Requests: s.active}
	if a.Running == 0 && a.Requests == 0 {
		a.IdleMs = time.Since(s.idleSince).Milliseconds()
	}
	s.mu.Unlock()
	h.BootID, h.Activity = s.bootID, &a
	return h
}

func newBootID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ArmIdle starts the idle timer if nothing holds the agent; call it once the
// listener is up.
func (s *Server) ArmIdle() {
	s.mu.Lock()
	s.armIdleLocked()
	s.mu.Unlock()
}

func (s *Server) armIdleLocked() {
	if s.cfg.IdleTimeout <= 0 || s.active > 0 || s.retiring {
		return
	}
	if s.idleTimer != nil {
		s.idleTimer.Stop()
	}
	s.idleTimer = time.AfterFunc(s.cfg.IdleTimeout, func() {
		s.mu.Lock()
		idle := s.active == 0 && !s.retiring
		s.mu.Unlock()
		if idle {
			s.log.Info("idle timeout reached; exiting", "idleTimeout", s.cfg.IdleTimeout)
			s.Shutdown()
			s.exit(0)
		}
	})
}

// retire is what the agent does when it cannot prove a command is gone:
// it stops answering work (503 worker_retiring), stops what it can, and
// exits 1 so the tier tears down the whole sandbox.
func (s *Server) retire(err error) {
	s.mu.Lock()
	if s.retiring {
		s.mu.Unlock()
		return
	}
	s.retiring = true
	if s.idleTimer != nil {
		s.idleTimer.Stop()
	}
	s.mu.Unlock()
	s.log.Error("termination could not be confirmed; retiring", "err", err)
	if s.onRetire != nil {
		s.onRetire()
	}
	time.AfterFunc(50*time.Millisecond, func() {
		killDescendants(os.Getpid(), time.Now().Add(time.Second))
		s.exit(1)
	})
}

// Shutdown stops every command the agent started: each live group gets
// SIGTERM, the grace period, then SIGKILL, and finally everything still
// below the agent (setsid escapees included) is killed.
// cancelRunning ends every execution in flight as cancelled, at once, and
// returns once each has settled (or failed to).
func (s *Server) cancelRunning() {
	s.mu.Lock()
	live := make([]*execution, 0, len(s.running))
	for e := range s.running {
		live = append(live, e)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.terminate(e, causeCancelled)
		}()
	}
	wg.Wait()
}

func (s *Server) Shutdown() {
	s.mu.Lock()
	s.retiring = true
	s.mu.Unlock()
	s.cancelRunning()
	killDescendants(os.Getpid(), time.Now().Add(s.cfg.CancelConfirmTimeout))
	// What the commands wrote reaches the disk before the agent goes.
	if _, ok := s.flush(time.Duration(wire.DefaultFlushTimeoutMs) * time.Millisecond); !ok {
		s.log.Warn("flush at shutdown did not finish in time")
	}
}
