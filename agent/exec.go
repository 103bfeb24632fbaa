//go:build linux

package agent

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"golang.org/x/sys/unix"
)

// Execution states. A reservation is inert: losing its response leaks one
// bounded, expiring record, never a process. Only a live reservation can be
// started, which is what makes cancel-before-start sound.
const (
	stateReserved = "reserved"
	stateStarting = "starting"
	stateRunning  = "running"
	stateExited   = "exited" // leader gone, output or group not yet
	stateTerminal = "terminal"
)

const (
	causeCancelled = "cancelled"
	causeTimeout   = "timeout"
)

// validExecutionID: an id of the shape the agent hands out (wire.ValidExecutionID).
var validExecutionID = wire.ValidExecutionID

// execution is one command's record. Every field is guarded by Server.mu.
type execution struct {
	id        string
	tracked   bool
	spare     bool // a host's spare reservation, evictable while reserved
	state     string
	expiresAt time.Time
	startedAt time.Time
	started   bool

	outcome string
	result  *wire.Result
	errMsg  string

	pgid    int
	exitWS  unix.WaitStatus
	cause   string
	policy  string
	handoff bool
	// leftovers: the agent stopped what the command left running after
	// its leader exited (wire.Result.LeftoversStopped).
	leftovers bool
	// kept is the command's retained output (wire.ExecuteRequest.RetainOutput).
	kept    *retained
	stdio   bool
	stdin   *os.File
	stdinMu sync.Mutex
	pipes   [2]uint64 // inodes of the stdout and stderr pipes
	out     *eventStream
	done    chan struct{}
	term    *termination
	settled bool
}

type termination struct {
	done    chan struct{}
	payload wire.Terminal
	err     error
}

func (e *execution) payload() wire.Terminal {
	return wire.Terminal{OK: true, State: e.outcome, Started: e.started, Result: e.result, Error: e.errMsg}
}

func (s *Server) rememberTerminalLocked(e *execution, outcome string, res *wire.Result, errMsg string) {
	e.state = stateTerminal
	e.outcome, e.result, e.errMsg = outcome, res, errMsg
	e.expiresAt = time.Now().Add(s.cfg.ExecutionTerminalTTL)
	e.stdin = nil
}

func (s *Server) pruneLocked(now time.Time) {
	for id, e := range s.executions {
		if (e.state == stateReserved || e.state == stateTerminal) && !e.expiresAt.After(now) {
			delete(s.executions, id)
		}
	}
}

// makeRoomLocked evicts records until a new reservation fits: the oldest
// terminal ones first, then hosts' spare reservations, oldest first. Live
// executions and reservations the caller asked for are never evicted.
func (s *Server) makeRoomLocked() {
	for len(s.executions) >= s.cfg.MaxTrackedExecutions {
		var oldest, spare *execution
		for _, e := range s.executions {
			switch {
			case e.state == stateTerminal:
				if oldest == nil || e.expiresAt.Before(oldest.expiresAt) {
					oldest = e
				}
			case e.state == stateReserved && e.spare:
				if spare == nil || e.expiresAt.Before(spare.expiresAt) {
					spare = e
				}
			}
		}
		if oldest == nil {
			oldest = spare
		}
		if oldest == nil {
			return
		}
		delete(s.executions, oldest.id)
	}
}

func newExecutionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("exec_%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (s *Server) handleReserve(w httpd.ResponseWriter, r *httpd.Request) {
	res, ok := s.reserve(r.Header.Get(wire.LeaseHeader) == wire.LeaseSpare)
	if !ok {
		writeJSON(w, httpd.StatusServiceUnavailable, wire.ErrorBody{Error: wire.CodeExecutionCapacity,
			Message: fmt.Sprintf("agent already tracks %d execution leases", s.cfg.MaxTrackedExecutions)})
		return
	}
	writeJSON(w, httpd.StatusCreated, res)
}

// reserve takes an execution lease, a host's spare one if spare; false
// when the agent is at capacity.
func (s *Server) reserve(spare bool) (wire.Reservation, bool) {
	now := time.Now()
	s.mu.Lock()
	s.pruneLocked(now)
	s.makeRoomLocked()
	if len(s.executions) >= s.cfg.MaxTrackedExecutions {
		s.mu.Unlock()
		return wire.Reservation{}, false
	}
	e := &execution{id: newExecutionID(), tracked: true, state: stateReserved, expiresAt: now.Add(s.cfg.ExecutionLeaseTTL), spare: spare}
	s.executions[e.id] = e
	s.mu.Unlock()
	return wire.Reservation{
		OK: true, ProtocolVersion: wire.ProtocolVersion, ExecutionID: e.id,
		LeaseExpiresAt: e.expiresAt.UnixMilli(), NormalExitPolicy: s.cfg.NormalExitPolicy,
		Stdio: wire.StdioInfo{Version: 1, MaxLifetimeMs: s.cfg.MaxTimeout.Milliseconds()},
	}, true
}

// nextLease answers a command whose request asked for the next spare
// (wire.LeaseNext) with one, unless the agent is at capacity. It runs as
// the command's 200 answer is about to start.
func (s *Server) nextLease(w httpd.ResponseWriter, r *httpd.Request) {
	if r.Header.Get(wire.LeaseHeader) != wire.LeaseNext {
		return
	}
	if res, ok := s.reserve(true); ok {
		w.Header().Set(wire.NextLeaseHeader, res.ExecutionID+" "+strconv.FormatInt(res.LeaseExpiresAt, 10))
	}
}

func (s *Server) handleCancel(w httpd.ResponseWriter, r *httpd.Request) {
	var body struct {
		ExecutionID any `json:"executionId"`
	}
	if err := s.readBody(r, &body); err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
		return
	}
	id, _ := body.ExecutionID.(string)
	if !validExecutionID(id) {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidExecutionID})
		return
	}
	s.mu.Lock()
	s.pruneLocked(time.Now())
	e, ok := s.executions[id]
	if !ok {
		s.mu.Unlock()
		writeJSON(w, httpd.StatusNotFound, wire.ErrorBody{Error: wire.CodeUnknownExecution})
		return
	}
	switch e.state {
	case stateReserved, stateStarting:
		start := e.startedAt
		if start.IsZero() {
			start = time.Now()
		}
		s.rememberTerminalLocked(e, wire.OutcomeCancelled, &wire.Result{ExitCode: 1, DurationMs: time.Since(start).Milliseconds()}, "")
		fallthrough
	case stateTerminal:
		p := e.payload()
		s.mu.Unlock()
		writeJSON(w, httpd.StatusOK, p)
		return
	}
	s.mu.Unlock()
	p, err := s.terminate(e, causeCancelled)
	if err != nil {
		writeJSON(w, httpd.StatusGatewayTimeout, wire.ErrorBody{Error: wire.CodeCancellationUnconfirmed, Message: err.Error()})
		s.retire(err)
		return
	}
	writeJSON(w, httpd.StatusOK, p)
}

// terminate stops a live execution's process group (SIGTERM, the grace
// period, SIGKILL) and returns once its end is known. Concurrent callers
// share one attempt; a failed attempt may be retried.
func (s *Server) terminate(e *execution, cause string) (wire.Terminal, error) {
	s.mu.Lock()
	if e.state == stateTerminal {
		p := e.payload()
		s.mu.Unlock()
		return p, nil
	}
	t := e.term
	if t == nil {
		t = &termination{done: make(chan struct{})}
		e.term = t
		go s.runTermination(e, cause, t)
	}
	s.mu.Unlock()
	<-t.done
	return t.payload, t.err
}

func (s *Server) runTermination(e *execution, cause string, t *termination) {
	deadline := time.Now().Add(s.cfg.CancelConfirmTimeout)
	s.mu.Lock()
	signal := false
	switch e.state {
	case stateRunning:
		signal = true
	case stateExited:
		// The leader is gone but members of its group, or holders of its
		// output, live on. Until close commits a computer-lifetime
		// handoff, cancellation wins.
		signal = !e.handoff && groupAlive(e.pgid)
	}
	if e.cause == "" && !e.handoff && (e.state == stateRunning || e.state == stateExited) {
		e.cause = cause
	}
	pgid := e.pgid
	s.mu.Unlock()

	var err error
	if signal {
		err = s.stopGroup(pgid, deadline)
	}
	if err == nil {
		err = s.awaitClose(e, deadline)
	}
	s.mu.Lock()
	if err != nil {
		e.term = nil
	} else {
		t.payload = e.payload()
	}
	t.err = err
	close(t.done)
	s.mu.Unlock()
}

// awaitClose waits for the execution to settle. Once its group is gone, what
// can still hold it open is a process outside the group holding its output
// pipes (one that called setsid), or a caller not reading the stream; both
// are cut loose so the end can be confirmed.
func (s *Server) awaitClose(e *execution, deadline time.Time) error {
	// As the reference does: a confirmation that comes after the deadline
	// is no confirmation (without this, whether a settle already observed
	// counts was up to the order select chose).
	if time.Until(deadline) <= 0 {
		return errors.New("execution close was not observed before the deadline")
	}
	select {
	case <-e.done:
		return nil
	case <-time.After(min(100*time.Millisecond, time.Until(deadline))):
	}
	s.mu.Lock()
	pipes, out := e.pipes, e.out
	s.mu.Unlock()
	for _, pid := range pipeHolders(pipes) {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	if out != nil {
		out.abandonAfter(time.Second)
	}
	select {
	case <-e.done:
		return nil
	case <-time.After(time.Until(deadline)):
		return errors.New("execution close was not observed before the deadline")
	}
}

// stopGroup sends SIGTERM, waits out the grace period, escalates to SIGKILL
// and confirms the group is empty. Signalling a group id is safe while the
// group has members: the kernel does not reuse an id still in use as a
// process group.
func (s *Server) stopGroup(pgid int, deadline time.Time) error {
	if err := signalGroup(pgid, unix.SIGTERM); err != nil {
		return err
	}
	return s.killGroupAfterGrace(pgid, deadline)
}

// killGroupAfterGrace waits the agent's grace for a group sent TERM to
// end, then kills what is left of it until it has.
func (s *Server) killGroupAfterGrace(pgid int, deadline time.Time) error {
	if waitGroupGone(pgid, minTime(deadline, time.Now().Add(s.cfg.CancelGrace))) {
		return nil
	}
	// Keep killing until the group is empty: a member that forks while the
	// first SIGKILL lands leaves a child in the group.
	for {
		if err := signalGroup(pgid, unix.SIGKILL); err != nil {
			return err
		}
		if waitGroupGone(pgid, minTime(deadline, time.Now().Add(20*time.Millisecond))) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d remained live after SIGKILL", pgid)
		}
	}
}

// sweepOrphansLocked ends what a stopped execution left behind outside its
// group (a daemon that called setsid, double-forked and closed its output),
// which only the tree below the agent can show. It runs as the execution
// settles, and only when no other command is live, since an orphan cannot
// tell whose it was; s.mu is held, so no command starts meanwhile. It
// spares the processes that computer-lifetime commands handed over, and
// the sessions' groups.
func (s *Server) sweepOrphansLocked(e *execution) {
	if _, ok := s.running[e]; !ok || len(s.running) != 1 {
		return
	}
	// Sessions are the sandbox's, not the command's: their groups stay.
	sessions := map[int]bool{}
	for _, se := range s.sessions {
		if se.ws == nil {
			sessions[se.pid] = true
		}
	}
	for _, pid := range descendants(os.Getpid()) {
		if pg, err := unix.Getpgid(pid); err == nil {
			if _, spare := s.handoffs[pg]; spare || sessions[pg] {
				continue
			}
		}
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// executeBody is /execute's body, decoded loosely so that each field is
// validated in the reference's order with the reference's error codes.
type executeBody struct {
	ExecutionID      json.RawMessage `json:"executionId"`
	Command          json.RawMessage `json:"command"`
	Args             json.RawMessage `json:"args"`
	Cwd              json.RawMessage `json:"cwd"`
	Env              json.RawMessage `json:"env"`
	Stdin            json.RawMessage `json:"stdin"`
	StdinEncoding    json.RawMessage `json:"stdinEncoding"`
	OutputEncoding   json.RawMessage `json:"outputEncoding"`
	TimeoutMs        json.RawMessage `json:"timeoutMs"`
	MaxOutputBytes   json.RawMessage `json:"maxOutputBytes"`
	Stdio            json.RawMessage `json:"stdio"`
	NormalExitPolicy json.RawMessage `json:"normalExitPolicy"`
	RetainOutput     json.RawMessage `json:"retainOutput"`
}

// decodeExecuteBody decodes an /execute body. Each field's value is kept
// as it came (parseExecute judges it as the reference does), so the
// body's shape is all there is to read: wire.Scanner reads the keys the
// body knows, and leaves anything else (another key, one in another case,
// deep nesting) to encoding/json, as readBody does; where it succeeds, its
// result is encoding/json's (FuzzDecodeExecuteBody). encoding/json's first
// decoding of the type took some 0.2 ms of every sandbox's first command.
func decodeExecuteBody(b []byte, dst *executeBody) error {
	if scanExecuteBody(b, dst) {
		return nil
	}
	*dst = executeBody{}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("request body is not a JSON object: %v", err)
	}
	return nil
}

// scanExecuteBody is decodeExecuteBody's wire.Scanner part: false leaves
// b to encoding/json.
func scanExecuteBody(b []byte, e *executeBody) bool {
	s := wire.NewScanner(b)
	return s.Object(func(key string) bool {
		f := e.field(key)
		return f != nil && s.Raw((*[]byte)(f))
	}) && s.End()
}

// field is the field key names, exactly; nil for any other key.
func (e *executeBody) field(key string) *json.RawMessage {
	switch key {
	case "executionId":
		return &e.ExecutionID
	case "command":
		return &e.Command
	case "args":
		return &e.Args
	case "cwd":
		return &e.Cwd
	case "env":
		return &e.Env
	case "stdin":
		return &e.Stdin
	case "stdinEncoding":
		return &e.StdinEncoding
	case "outputEncoding":
		return &e.OutputEncoding
	case "timeoutMs":
		return &e.TimeoutMs
	case "maxOutputBytes":
		return &e.MaxOutputBytes
	case "stdio":
		return &e.Stdio
	case "normalExitPolicy":
		return &e.NormalExitPolicy
	case "retainOutput":
		return &e.RetainOutput
	}
	return nil
}

// rawString is m's value when it is a JSON string.
func rawString(m json.RawMessage) (string, bool) {
	if len(m) >= 2 && m[0] == '"' && m[len(m)-1] == '"' {
		if s, ok := wire.UnquoteString(m[1 : len(m)-1]); ok {
			return s, true
		}
	}
	var s string
	if len(m) == 0 || json.Unmarshal(m, &s) != nil {
		return "", false
	}
	return s, true
}

// truthy is JavaScript's truthiness of a JSON value (absent is falsy).
func truthy(m json.RawMessage) bool {
	switch string(m) {
	case "", "null", "false", "0", `""`:
		return false
	}
	return true
}

// jsString renders a scalar JSON value the way JavaScript's String() would.
func jsString(m json.RawMessage) (string, error) {
	// A string (stdin may be megabytes) in one pass where it can be.
	if len(m) >= 2 && m[0] == '"' && m[len(m)-1] == '"' {
		if s, ok := wire.UnquoteString(m[1 : len(m)-1]); ok {
			return s, nil
		}
	}
	var v any
	if err := json.Unmarshal(m, &v); err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(v), nil
	case nil:
		return "null", nil
	}
	return "", errors.New("expected a string")
}

func (s *Server) timeoutFor(m json.RawMessage) (time.Duration, error) {
	if len(m) == 0 {
		return s.cfg.DefaultTimeout, nil
	}
	var ms float64
	if err := json.Unmarshal(m, &ms); err != nil || math.IsNaN(ms) || ms <= 0 || ms > float64(s.cfg.MaxTimeout.Milliseconds()) {
		return 0, fmt.Errorf("timeoutMs must be a finite number in (0, %d]: that is the sandbox's ceiling (its maxTimeoutMs at create; CORDON_AGENT_MAX_TIMEOUT_MS for an agent started by hand)", s.cfg.MaxTimeout.Milliseconds())
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// execRequest is a validated /execute body.
type execRequest struct {
	id        string
	command   string
	cwd       string // lexical, inside the workspace
	timeout   time.Duration
	maxOut    int64
	stdio     bool
	rawOutput bool  // output events carry base64 of the exact bytes
	retain    int64 // bytes of output kept for readers after the stream (0: none)
	policy    string
	argv      []string
	env       []string
	stdin     *string
	spawnErr  error // refused at spawn time, after admission, as the reference does
}

// parseExecute validates an /execute body in the reference's order, with
// its error codes. It does no I/O.
func (s *Server) parseExecute(b executeBody) (*execRequest, *wire.ErrorBody) {
	bad := func(code, msg string) (*execRequest, *wire.ErrorBody) {
		return nil, &wire.ErrorBody{Error: code, Message: msg}
	}
	q := &execRequest{policy: wire.PolicyStrict, cwd: s.cfg.Workspace, maxOut: s.cfg.DefaultMaxOutputBytes}
	var ok bool
	if q.command, ok = rawString(b.Command); !ok || q.command == "" {
		return bad(wire.CodeMissingCommand, "")
	}
	q.stdio = len(b.Stdio) > 0
	if q.stdio && string(b.Stdio) != "true" {
		return bad(wire.CodeInvalidStdio, "")
	}
	if len(b.NormalExitPolicy) > 0 {
		if p, ok := rawString(b.NormalExitPolicy); ok {
			q.policy = p
		} else {
			q.policy = string(b.NormalExitPolicy) // refused below
		}
	}
	if q.stdio && (len(b.ExecutionID) == 0 || len(b.Stdin) > 0 || q.policy == wire.PolicyComputerLifetime) {
		return bad(wire.CodeStdioRequiresReserved, "")
	}
	if q.policy != wire.PolicyStrict && q.policy != wire.PolicyComputerLifetime {
		return bad(wire.CodeInvalidNormalExitPolicy, "")
	}
	if q.policy == wire.PolicyComputerLifetime && s.cfg.NormalExitPolicy != wire.PolicyComputerLifetime {
		return bad(wire.CodeComputerLifetimeDisabled, "")
	}
	q.id, _ = rawString(b.ExecutionID)
	if len(b.ExecutionID) > 0 && !validExecutionID(q.id) {
		return bad(wire.CodeInvalidExecutionID, "")
	}
	ws := s.cfg.Workspace
	if c, ok := rawString(b.Cwd); ok && c != "" {
		q.cwd = filepath.Join(ws, c)
		if filepath.IsAbs(c) {
			q.cwd = filepath.Clean(c)
		}
		if !within(q.cwd, ws) || strings.IndexByte(c, 0) >= 0 {
			return bad(wire.CodeInvalidCwd, errEscapes.Error())
		}
	} else if !ok && truthy(b.Cwd) {
		return bad(wire.CodeInvalidCwd, "cwd must be a string")
	}
	var err error
	if q.timeout, err = s.timeoutFor(b.TimeoutMs); err != nil {
		return bad(wire.CodeInvalidTimeout, err.Error())
	}
	if len(b.MaxOutputBytes) > 0 {
		var n float64
		if json.Unmarshal(b.MaxOutputBytes, &n) == nil && n != 0 && !math.IsNaN(n) {
			q.maxOut = int64(max(min(n, math.MaxInt64/2), math.MinInt64/2))
		}
	}
	q.argv, q.env, q.stdin, q.spawnErr = s.commandLine(q.command, b)
	if len(b.RetainOutput) > 0 && string(b.RetainOutput) != "false" {
		if len(b.ExecutionID) == 0 {
			return bad(wire.CodeInvalidBody, "retainOutput needs an executionId, which the output is read back by")
		}
		q.retain = wire.DefaultRetainBytes
		if string(b.RetainOutput) != "true" {
			n, err := strconv.ParseInt(string(b.RetainOutput), 10, 64)
			if err != nil || n < wire.MinRetainBytes || n > wire.MaxRetainBytes {
				return bad(wire.CodeInvalidRetainBytes, "retainOutput is true or a byte count from "+strconv.Itoa(wire.MinRetainBytes)+" to "+strconv.Itoa(wire.MaxRetainBytes))
			}
			q.retain = n
		}
	}
	if len(b.OutputEncoding) > 0 {
		if enc, ok := rawString(b.OutputEncoding); !ok || enc != wire.Base64 {
			return bad(wire.CodeInvalidBody, `outputEncoding must be "base64"`)
		}
		q.rawOutput = true
	}
	if len(b.StdinEncoding) > 0 {
		if enc, ok := rawString(b.StdinEncoding); !ok || enc != wire.Base64 {
			return bad(wire.CodeInvalidBody, `stdinEncoding must be "base64"`)
		}
		if q.stdin != nil {
			raw, err := base64.StdEncoding.DecodeString(*q.stdin)
			if err != nil {
				return bad(wire.CodeInvalidBody, "stdin is not valid base64")
			}
			v := string(raw)
			q.stdin = &v
		}
	}
	return q, nil
}

func (s *Server) handleExecute(w httpd.ResponseWriter, r *httpd.Request) {
	if s.quiescingNow() {
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeQuiesceInProgress, Message: "a quiesce is stopping everything; try again when it answers"})
		return
	}
	var b executeBody
	raw, err := s.bodyBytes(r)
	if err == nil {
		err = decodeExecuteBody(raw, &b)
	}
	if err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
		return
	}
	q, refusal := s.parseExecute(b)
	if refusal != nil {
		writeJSON(w, httpd.StatusBadRequest, refusal)
		return
	}
	start := time.Now()
	if q.retain > 0 {
		s.mu.Lock()
		over := s.retainedLocked()+q.retain > MaxRetainTotal
		s.mu.Unlock()
		if over {
			writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeTooManySessions, Message: "the agent retains at most " + strconv.Itoa(MaxRetainTotal>>20) + " MiB of output in all; forget sessions, or retain less"})
			return
		}
	}
	e := &execution{state: stateStarting, startedAt: start, policy: q.policy, stdio: q.stdio, done: make(chan struct{})}
	if q.retain > 0 {
		e.kept = newRetained(q.retain)
	}
	if q.id != "" {
		s.mu.Lock()
		s.pruneLocked(start)
		t, ok := s.executions[q.id]
		if !ok {
			s.mu.Unlock()
			writeJSON(w, httpd.StatusNotFound, wire.ErrorBody{Error: wire.CodeUnknownExecution})
			return
		}
		if t.state != stateReserved {
			st := t.state
			if st == stateTerminal {
				st = t.outcome
			}
			s.mu.Unlock()
			writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeExecutionNotReserved, State: st})
			return
		}
		// Validation is done, so admission is one atomic transition.
		t.state, t.startedAt, t.expiresAt = stateStarting, start, time.Time{}
		t.policy, t.stdio, t.done, t.kept = q.policy, q.stdio, e.done, e.kept
		e = t
		s.mu.Unlock()
	}
	fail := func(code string, err error) {
		s.mu.Lock()
		if e.tracked && e.state == stateStarting {
			s.rememberTerminalLocked(e, wire.OutcomeFailed, nil, err.Error())
		}
		s.mu.Unlock()
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: code, Message: err.Error()})
	}
	realCwd, err := mkdirIn(q.cwd, s.cfg.Workspace)
	if err != nil {
		fail(wire.CodeMkdirFailed, err)
		return
	}
	if q.spawnErr != nil {
		fail(wire.CodeSpawnFailed, q.spawnErr)
		return
	}
	s.run(w, r, e, q, realCwd)
}

// commandLine turns the request into argv, environment and stdin, refusing
// what the reference refuses synchronously at spawn.
func (s *Server) commandLine(command string, b executeBody) (argv, env []string, stdin *string, err error) {
	argv = []string{command}
	if len(b.Args) > 0 && b.Args[0] == '[' {
		var args []any
		if err := json.Unmarshal(b.Args, &args); err != nil {
			return nil, nil, nil, err
		}
		for i, a := range args {
			str, ok := a.(string)
			if !ok {
				return nil, nil, nil, fmt.Errorf("args[%d] must be a string", i)
			}
			argv = append(argv, str)
		}
	}
	env = s.env
	if len(b.Env) > 0 && string(b.Env) != "null" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b.Env, &m); err != nil {
			return nil, nil, nil, errors.New("env must be an object of strings")
		}
		over := make(map[string]string, len(m))
		for k, raw := range m {
			v, err := jsString(raw)
			if err != nil || strings.ContainsAny(k, "=\x00") || k == "" || strings.IndexByte(v, 0) >= 0 {
				return nil, nil, nil, fmt.Errorf("env %q is not a valid variable", k)
			}
			over[k] = v
		}
		env = make([]string, 0, len(s.env)+len(over))
		for _, kv := range s.env {
			k, _, _ := strings.Cut(kv, "=")
			if _, ok := over[k]; !ok {
				env = append(env, kv)
			}
		}
		for k, v := range over {
			env = append(env, k+"="+v)
		}
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, nil, nil, errors.New("command and args must not contain NUL bytes")
		}
	}
	if len(b.Stdin) > 0 {
		v, err := jsString(b.Stdin)
		if err != nil {
			return nil, nil, nil, errors.New("stdin must be a string")
		}
		stdin = &v
	}
	return argv, env, stdin, nil
}

// lookPath finds command the way execvp does, in the PATH of the command's
// own environment.
func lookPath(command string, env []string, dir string) (string, error) {
	if strings.Contains(command, "/") {
		return command, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, command)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", spawnError(command, unix.ENOENT)
}
