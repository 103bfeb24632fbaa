package agent

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// MaxSessions bounds the sessions an agent keeps, running or exited (an
// exited one goes with DELETE), and MaxRetainTotal the output they retain
// together.
const (
	MaxSessions    = 64
	MaxRetainTotal = 256 << 20
)

// session is one program of the sandbox's own (wire.Session). Its fields
// after start are guarded by Server.mu; out has its own lock.
type session struct {
	id        string
	command   string
	args      []string
	pid       int
	startedAt time.Time
	endedAt   time.Time
	ws        *unix.WaitStatus // once the leader exited
	out       *retained
	exited    chan struct{} // closed when the leader has exited
	// tty is the terminal's master side, for a terminal session: input is
	// written there, sizes set on it. inMu serialises the writes.
	tty  *os.File
	inMu sync.Mutex
	// stdin is the write end of a Stdin session's standard input, until
	// it is closed (?end=1, or the session's end); under inMu, which a
	// write holds. stdinOpen says so without waiting for one.
	stdin     *os.File
	stdinOpen atomic.Bool
	// timer is the session's timeout, if it has one.
	timer *sessionTimer
}

// sessionTimer is a session's timeout: what its timer needs and no more,
// since the timer can outlive the session's record (forgotten while
// members of its group live on) and must not keep its retained output.
type sessionTimer struct {
	pid   int
	after time.Duration
	// leaderGone, as the session's ws, and fired, once the timeout ended
	// the group: under the server's mu.
	leaderGone bool
	fired      bool
}

// closeStdinLocked closes the session's standard input, if it has one
// open; under inMu.
func (se *session) closeStdinLocked() {
	if se.stdin != nil {
		se.stdin.Close()
		se.stdin = nil
		se.stdinOpen.Store(false)
	}
}

func (se *session) wireLocked() wire.Session {
	first, next := se.out.bounds()
	w := wire.Session{
		ID: se.id, Command: se.command, Args: se.args, Pid: se.pid, State: wire.SessionRunning,
		StartedAt: se.startedAt.UnixMilli(), OutputFirst: first, OutputNext: next, RetainBytes: se.out.limit,
		TTY: se.tty != nil, Stdin: se.stdinOpen.Load(),
	}
	if se.timer != nil {
		w.TimeoutMs, w.TimedOut = se.timer.after.Milliseconds(), se.timer.fired
	}
	if se.ws != nil {
		w.State, w.EndedAt = wire.SessionExited, se.endedAt.UnixMilli()
		code := -1
		if se.ws.Exited() {
			code = se.ws.ExitStatus()
		} else if se.ws.Signaled() {
			w.Signal = signalName(se.ws.Signal())
		}
		w.ExitCode = &code
	}
	return w
}

func newSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sess_" + hex.EncodeToString(b[:])
}

// handleSessions routes /sessions and /sessions/ID[/output|/kill|/wait].
func (s *Server) handleSessions(w httpd.ResponseWriter, r *httpd.Request) {
	rest := strings.TrimPrefix(r.URL.Path, wire.RouteSessions)
	if rest == "" {
		switch r.Method {
		case httpd.MethodPost:
			s.startSession(w, r)
		case httpd.MethodGet:
			s.listSessions(w)
		default:
			writeJSON(w, httpd.StatusNotFound, wire.ErrorBody{Error: wire.CodeNotFound})
		}
		return
	}
	id, verb, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	s.mu.Lock()
	se := s.sessions[id]
	s.mu.Unlock()
	if se == nil {
		writeJSON(w, httpd.StatusNotFound, wire.ErrorBody{Error: wire.CodeUnknownSession, Message: "no session " + strconv.Quote(id)})
		return
	}
	switch {
	case verb == "" && r.Method == httpd.MethodGet:
		s.mu.Lock()
		ws := se.wireLocked()
		s.mu.Unlock()
		writeJSON(w, httpd.StatusOK, ws)
	case verb == "" && r.Method == httpd.MethodDelete:
		s.mu.Lock()
		running := se.ws == nil
		if !running {
			delete(s.sessions, id)
		}
		s.mu.Unlock()
		if running {
			writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeSessionRunning, Message: "kill the session before forgetting it"})
			return
		}
		w.WriteHeader(httpd.StatusNoContent)
	case verb == "output" && r.Method == httpd.MethodGet:
		s.sessionOutput(w, r, se)
	case verb == "kill" && r.Method == httpd.MethodPost:
		s.killSession(w, r, se)
	case verb == "wait" && r.Method == httpd.MethodGet:
		s.waitSession(w, r, se)
	case verb == "input" && r.Method == httpd.MethodPost:
		s.sessionInput(w, r, se)
	case verb == "resize" && r.Method == httpd.MethodPost:
		s.resizeSession(w, r, se)
	default:
		writeJSON(w, httpd.StatusNotFound, wire.ErrorBody{Error: wire.CodeNotFound})
	}
}

// retainedLocked is the output the sessions and retained executions may
// hold together.
func (s *Server) retainedLocked() int64 {
	var n int64
	for _, se := range s.sessions {
		n += se.out.limit
	}
	for _, e := range s.executions {
		if e.kept != nil {
			n += e.kept.limit
		}
	}
	return n
}

func (s *Server) listSessions(w httpd.ResponseWriter) {
	s.mu.Lock()
	list := wire.SessionList{Sessions: []wire.Session{}}
	for _, se := range s.sessions {
		list.Sessions = append(list.Sessions, se.wireLocked())
	}
	s.mu.Unlock()
	sort.Slice(list.Sessions, func(i, j int) bool { return list.Sessions[i].StartedAt < list.Sessions[j].StartedAt })
	writeJSON(w, httpd.StatusOK, list)
}

func (s *Server) startSession(w httpd.ResponseWriter, r *httpd.Request) {
	if s.quiescingNow() {
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeQuiesceInProgress, Message: "a quiesce is stopping everything; try again when it answers"})
		return
	}
	bad := func(code, msg string) {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: code, Message: msg})
	}
	raw, err := s.bodyBytes(r)
	if err != nil {
		bad(wire.CodeInvalidBody, err.Error())
		return
	}
	// Only what a session takes: a field it did not take yet (timeoutMs,
	// stdin) or a misspelt one ("terminal" for tty) was once taken and
	// ignored, and the session ran without what its caller asked for.
	var req struct {
		ID          json.RawMessage `json:"id"`
		RetainBytes json.RawMessage `json:"retainBytes"`
		TTY         bool            `json:"tty"`
		Stdin       bool            `json:"stdin"`
		Rows        int64           `json:"rows"`
		Cols        int64           `json:"cols"`
		Command     json.RawMessage `json:"command"`
		Args        json.RawMessage `json:"args"`
		Cwd         json.RawMessage `json:"cwd"`
		Env         json.RawMessage `json:"env"`
		TimeoutMs   json.RawMessage `json:"timeoutMs"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err = dec.Decode(&req)
	if err == nil && dec.More() {
		err = errors.New("more follows the request's object")
	}
	if err != nil {
		bad(wire.CodeInvalidBody, "the request is not a session's (id, command, args, cwd, env, retainBytes, tty, rows, cols, stdin, timeoutMs): "+err.Error())
		return
	}
	// Command, args, cwd and env are judged as /execute judges them.
	q, eb := s.parseExecute(executeBody{Command: req.Command, Args: req.Args, Cwd: req.Cwd, Env: req.Env})
	if eb != nil {
		writeJSON(w, httpd.StatusBadRequest, eb)
		return
	}
	if q.spawnErr != nil {
		bad(wire.CodeInvalidBody, q.spawnErr.Error())
		return
	}
	id := newSessionID()
	if len(req.ID) > 0 {
		if v, ok := rawString(req.ID); !ok || !wire.ValidSessionID(v) {
			bad(wire.CodeInvalidSessionID, "id must be 1 to 128 characters of A-Z a-z 0-9 _ . : -")
			return
		} else {
			id = v
		}
	}
	retain := int64(wire.DefaultRetainBytes)
	if len(req.RetainBytes) > 0 {
		n, err := strconv.ParseInt(string(req.RetainBytes), 10, 64)
		if err != nil || n < wire.MinRetainBytes || n > wire.MaxRetainBytes {
			bad(wire.CodeInvalidRetainBytes, "retainBytes must be an integer from "+strconv.Itoa(wire.MinRetainBytes)+" to "+strconv.Itoa(wire.MaxRetainBytes))
			return
		}
		retain = n
	}
	var timeout time.Duration
	if len(req.TimeoutMs) > 0 {
		n, err := strconv.ParseInt(string(req.TimeoutMs), 10, 64)
		if err != nil || n < 1 || n > wire.MaxSessionTimeoutMs {
			bad(wire.CodeInvalidTimeout, "timeoutMs must be an integer from 1 to "+strconv.Itoa(wire.MaxSessionTimeoutMs)+" (30 days); leave it out for no timeout")
			return
		}
		timeout = time.Duration(n) * time.Millisecond
	}
	if req.Rows < 0 || req.Rows > wire.MaxTermSize || req.Cols < 0 || req.Cols > wire.MaxTermSize || (!req.TTY && (req.Rows != 0 || req.Cols != 0)) {
		bad(wire.CodeInvalidSize, "rows and cols, for a tty, are from 1 to "+strconv.Itoa(wire.MaxTermSize))
		return
	}
	dir, err := mkdirIn(q.cwd, s.cfg.Workspace)
	if err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeMkdirFailed, Message: err.Error()})
		return
	}
	path, err := lookPath(q.command, q.env, dir)
	if err != nil {
		bad(wire.CodeInvalidBody, err.Error())
		return
	}
	if req.Stdin && req.TTY {
		bad(wire.CodeInvalidBody, "stdin is for a session without a terminal: a terminal's input is typed through /sessions/ID/input")
		return
	}
	// The program's stdio: two pipes (three with stdin), or one terminal.
	var outR, outW, errR, errW, tty, ttyIn, inR, inW *os.File
	if req.TTY {
		tty, ttyIn, err = openTerminal()
		if err == nil {
			err = setWinsize(tty, uint16(cmp.Or(req.Rows, 24)), uint16(cmp.Or(req.Cols, 80)))
			if err != nil {
				tty.Close()
				ttyIn.Close()
			}
		}
		if err != nil {
			writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeInternal, Message: "a terminal: " + err.Error()})
			return
		}
	} else {
		if outR, outW, err = os.Pipe(); err != nil {
			writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeInternal, Message: err.Error()})
			return
		}
		if errR, errW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeInternal, Message: err.Error()})
			return
		}
		if req.Stdin {
			if inR, inW, err = os.Pipe(); err != nil {
				for _, f := range []*os.File{outR, outW, errR, errW} {
					f.Close()
				}
				writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeInternal, Message: err.Error()})
				return
			}
		}
	}
	closeAll := func() {
		for _, f := range []*os.File{outR, outW, errR, errW, tty, ttyIn, inR, inW} {
			if f != nil {
				f.Close()
			}
		}
	}
	se := &session{id: id, command: q.command, args: q.argv[1:], out: newRetained(retain), exited: make(chan struct{}), tty: tty, stdin: inW}
	se.stdinOpen.Store(inW != nil)
	// The id is taken and the program spawned in one step, so that two
	// starts of one id cannot both run.
	s.mu.Lock()
	switch {
	case s.sessions[id] != nil:
		s.mu.Unlock()
		closeAll()
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeSessionExists, Message: "a session " + strconv.Quote(id) + " exists"})
		return
	case len(s.sessions) >= MaxSessions || s.retainedLocked()+retain > MaxRetainTotal:
		s.mu.Unlock()
		closeAll()
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeTooManySessions, Message: "at most " + strconv.Itoa(MaxSessions) +
			" sessions retaining " + strconv.Itoa(MaxRetainTotal>>20) + " MiB together; forget exited ones (DELETE /sessions/ID)"})
		return
	}
	files := []uintptr{s.devNull.Fd(), 0, 0}
	if tty != nil {
		files = []uintptr{ttyIn.Fd(), ttyIn.Fd(), ttyIn.Fd()}
	} else {
		files[1], files[2] = outW.Fd(), errW.Fd()
		if inR != nil {
			files[0] = inR.Fd()
		}
	}
	pid, exited, err := s.reaper.spawnTTY(path, q.argv, q.env, dir, files, tty != nil)
	if err != nil {
		s.mu.Unlock()
		closeAll()
		bad(wire.CodeInvalidBody, spawnError(q.command, err).Error())
		return
	}
	se.pid, se.startedAt = pid, time.Now()
	if timeout > 0 {
		se.timer = &sessionTimer{pid: pid, after: timeout}
	}
	s.sessions[id] = se
	desc := se.wireLocked()
	s.mu.Unlock()
	readers := []*os.File{outR, errR}
	if tty != nil {
		// The program holds the terminal's other side; the agent keeps
		// the master, whose reads end (EIO) once every holder of the
		// terminal has closed it.
		ttyIn.Close()
		readers = []*os.File{tty}
	} else {
		outW.Close()
		errW.Close()
		if inR != nil {
			inR.Close() // the program's
		}
	}
	// A running session is work: the agent does not idle out under it.
	release := s.acquireActivity()
	var pumps sync.WaitGroup
	for i, f := range readers {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			defer f.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := f.Read(buf)
				se.out.write(byte(i+1), buf[:n])
				if err != nil {
					return
				}
			}
		}()
	}
	stopTimer := func() bool { return false }
	if st := se.timer; st != nil {
		stopTimer = time.AfterFunc(st.after, func() { s.timeOutSession(st) }).Stop
	}
	go func() {
		ws := <-exited
		s.mu.Lock()
		se.ws, se.endedAt = &ws, time.Now()
		if se.timer != nil {
			se.timer.leaderGone = true
		}
		s.mu.Unlock()
		close(se.exited)
		se.inMu.Lock()
		se.closeStdinLocked()
		se.inMu.Unlock()
		release()
		// The output ends when every holder of its pipes has closed them
		// (the leader's children may keep writing).
		pumps.Wait()
		se.out.close()
		// The timeout is the process group's, leader or not: a program
		// that started a server and exited leaves it to the timer.
		if !groupAlive(pid) {
			stopTimer()
		}
	}()
	writeJSON(w, httpd.StatusCreated, desc)
}

// sessionOutput streams a session's retained output from ?from=N, then,
// with follow=1, what comes until its output ends.
func (s *Server) sessionOutput(w httpd.ResponseWriter, r *httpd.Request, se *session) {
	s.streamRetained(w, r, se.out, nil)
}

// streamRetained streams kept from ?from=N, then, with follow=1, what
// comes until it ends; result, when set, is asked for the result to put
// on the final end event (it may wait for the command to settle).
func (s *Server) streamRetained(w httpd.ResponseWriter, r *httpd.Request, kept *retained, result func() *wire.Result) {
	qv := r.URL.Query()
	from, err := strconv.ParseInt(qv.Get("from"), 10, 64)
	if qv.Get("from") == "" {
		from, err = 0, nil
	}
	if err != nil || from < 0 {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidOffset, Message: "from must be a byte offset (an integer from 0)"})
		return
	}
	follow := qv.Get("follow") == "1" || qv.Get("follow") == "true"
	chunks, first, done, ok, changed := kept.read(from, 256<<10)
	if !ok {
		_, next := kept.bounds()
		if from > next {
			writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidOffset, Message: "from is past the output's end (" + strconv.FormatInt(next, 10) + ")"})
			return
		}
		writeJSON(w, httpd.StatusGone, wire.OutputEvicted{Error: wire.CodeOutputEvicted,
			Message: "the output before offset " + strconv.FormatInt(first, 10) + " is no longer held; read from there", First: first})
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(httpd.StatusOK)
	out := newEventStream(w)
	out.flush()
	heartbeat := time.NewTicker(s.cfg.StdioHeartbeatInterval)
	defer heartbeat.Stop()
	for {
		for _, c := range chunks {
			out.sendLine(sessionChunk(c))
			from = c.off + int64(len(c.data))
		}
		if out.isBroken() {
			return
		}
		if len(chunks) == 0 && (done || !follow) {
			end := wire.SessionEvent{Type: wire.SessionEnd, Offset: from, Done: done}
			if done && result != nil {
				end.Result = result()
			}
			out.send(end)
			return
		}
		if len(chunks) == 0 {
			select {
			case <-changed:
			case <-heartbeat.C:
				out.heartbeat([]byte(`{"type":"heartbeat","offset":` + strconv.FormatInt(from, 10) + "}\n"))
			case <-r.Context().Done():
				return
			}
		}
		chunks, _, done, ok, changed = kept.read(from, 256<<10)
		if !ok {
			// Evicted while this reader lagged: it is told where the
			// output resumes, never given a gap.
			out.send(wire.SessionEvent{Type: wire.SessionEnd, Offset: from})
			return
		}
	}
}

// executionOutput serves GET /executions/ID/output: a retained
// execution's output, and its result once it has settled.
func (s *Server) executionOutput(w httpd.ResponseWriter, r *httpd.Request) {
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, wire.RouteExecutions), "/output")
	s.mu.Lock()
	e := s.executions[id]
	var kept *retained
	if e != nil {
		kept = e.kept
	}
	s.mu.Unlock()
	if kept == nil {
		writeJSON(w, httpd.StatusNotFound, wire.ErrorBody{Error: wire.CodeUnknownExecution, Message: "no execution " + strconv.Quote(id) + " whose output is retained (retainOutput), or its record has expired"})
		return
	}
	s.streamRetained(w, r, kept, func() *wire.Result {
		select {
		case <-e.done:
		case <-time.After(s.cfg.CancelConfirmTimeout):
			return nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return e.payload().Result
	})
}

// sessionChunk is the output event of c, written directly (base64 needs no
// escaping).
func sessionChunk(c chunk) []byte {
	stream := "stdout"
	if c.stream == 2 {
		stream = "stderr"
	}
	b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(c.data))+80)
	b = append(b, `{"type":"output","stream":"`...)
	b = append(b, stream...)
	b = append(b, `","offset":`...)
	b = strconv.AppendInt(b, c.off, 10)
	b = append(b, `,"data":"`...)
	b = base64.StdEncoding.AppendEncode(b, c.data)
	return append(b, "\"}\n"...)
}

// killSignals are the signals a kill may ask for, by name.
var killSignals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}

// killSession signals the session's process group and confirms it gone:
// after the grace, KILL; a group still there after CancelConfirmTimeout
// more is 504 kill_unconfirmed.
func (s *Server) killSession(w httpd.ResponseWriter, r *httpd.Request, se *session) {
	var req wire.KillRequest
	if err := s.readBody(r, &req); err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
		return
	}
	name := strings.TrimPrefix(strings.ToUpper(req.Signal), "SIG")
	if name == "" {
		name = "TERM"
	}
	sig, ok := killSignals[name]
	if !ok {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidSignal, Message: "signal must be one of TERM, KILL, INT, HUP, QUIT, USR1, USR2"})
		return
	}
	grace, ok := boundedMs(req.GraceMs, 5000, 60000)
	if !ok {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: "graceMs must be from 0 to 60000"})
		return
	}
	pgid := se.pid
	_ = signalGroup(pgid, sig)
	gone := func(deadline time.Time) bool {
		select {
		case <-se.exited:
		case <-time.After(time.Until(deadline)):
			return false
		}
		return waitGroupGone(pgid, deadline)
	}
	if !gone(time.Now().Add(grace)) {
		_ = signalGroup(pgid, syscall.SIGKILL)
		if !gone(time.Now().Add(s.cfg.CancelConfirmTimeout)) {
			writeJSON(w, httpd.StatusGatewayTimeout, wire.ErrorBody{Error: wire.CodeKillUnconfirmed, Message: "the session's processes did not end"})
			return
		}
	}
	s.mu.Lock()
	ws := se.wireLocked()
	s.mu.Unlock()
	writeJSON(w, httpd.StatusOK, ws)
}

// timeOutSession ends a session whose timeout has passed as a command's
// timeout ends a command: its process group, TERM then KILL. Once its
// leader has exited, the group's number stays the session's only while
// members of the group live; after that it may lead another command's
// group, which is spared. Programs start under mu, so none takes the
// number between the check and the TERM.
func (s *Server) timeOutSession(st *sessionTimer) {
	s.mu.Lock()
	ours := !st.leaderGone || (groupAlive(st.pid) && !s.leadsLocked(st.pid))
	if ours {
		st.fired = true
		_ = signalGroup(st.pid, unix.SIGTERM)
	}
	s.mu.Unlock()
	if !ours {
		return
	}
	if err := s.killGroupAfterGrace(st.pid, time.Now().Add(s.cfg.CancelConfirmTimeout)); err != nil {
		s.retire(err)
	}
}

// leadsLocked says a live command or session of the agent's leads process
// group pgid; under mu.
func (s *Server) leadsLocked(pgid int) bool {
	for e := range s.running {
		if e.pgid == pgid {
			return true
		}
	}
	for _, se := range s.sessions {
		if se.pid == pgid && se.ws == nil {
			return true
		}
	}
	return false
}

// waitSession answers once the session has exited, or after ?timeoutMs
// (default 30000, at most MaxTimeout).
func (s *Server) waitSession(w httpd.ResponseWriter, r *httpd.Request, se *session) {
	timeout := 30 * time.Second
	if v := r.URL.Query().Get("timeoutMs"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || time.Duration(n)*time.Millisecond > s.cfg.MaxTimeout {
			writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidTimeout, Message: "timeoutMs must be from 0 to " + strconv.FormatInt(s.cfg.MaxTimeout.Milliseconds(), 10)})
			return
		}
		timeout = time.Duration(n) * time.Millisecond
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-se.exited:
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	s.mu.Lock()
	ws := se.wireLocked()
	s.mu.Unlock()
	writeJSON(w, httpd.StatusOK, ws)
}

// sessionInput writes the raw body to a terminal session, as typed.
func (s *Server) sessionInput(w httpd.ResponseWriter, r *httpd.Request, se *session) {
	// Bytes as written: Enter alone is "\r", not an empty JSON body.
	data, err := s.rawBody(r)
	if err != nil || len(data) > wire.MaxInputBytes {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: "input is at most " + strconv.Itoa(wire.MaxInputBytes) + " bytes a request"})
		return
	}
	end := r.URL.Query().Get("end") == "1" || r.URL.Query().Get("end") == "true"
	if se.tty == nil {
		s.stdinInput(w, se, data, end)
		return
	}
	if end {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: "a terminal's input has no end to close: type \\x04 (Ctrl-D) to end a line discipline's input"})
		return
	}
	select {
	case <-se.exited:
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeStdioNotRunning, Message: "the session has exited"})
		return
	default:
	}
	if len(data) == 0 {
		// Nothing typed (a write of nothing may block on some terminals).
		writeJSON(w, httpd.StatusOK, wire.StdioWriteResponse{OK: true})
		return
	}
	se.inMu.Lock()
	// A program that reads nothing cannot hold this request forever.
	_ = se.tty.SetWriteDeadline(time.Now().Add(s.cfg.CancelConfirmTimeout))
	n, err := se.tty.Write(data)
	se.inMu.Unlock()
	if err != nil {
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeStdioDeliveryUnknown, Message: "the terminal took " + strconv.Itoa(n) + " bytes: " + err.Error()})
		return
	}
	writeJSON(w, httpd.StatusOK, wire.StdioWriteResponse{OK: true, BytesWritten: n})
}

// stdinInput writes data to a Stdin session's standard input, then, with
// end, closes it.
func (s *Server) stdinInput(w httpd.ResponseWriter, se *session, data []byte, end bool) {
	se.inMu.Lock()
	defer se.inMu.Unlock()
	if se.stdin == nil {
		select {
		case <-se.exited:
			writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeStdioNotRunning, Message: "the session has exited"})
		default:
			writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeNoStdin, Message: "the session has no standard input to write to: start it with stdin: true (or its input was closed)"})
		}
		return
	}
	n := 0
	if len(data) > 0 {
		// A program that reads nothing cannot hold this request forever.
		_ = se.stdin.SetWriteDeadline(time.Now().Add(s.cfg.CancelConfirmTimeout))
		var err error
		if n, err = se.stdin.Write(data); err != nil {
			writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeStdioDeliveryUnknown, Message: "its standard input took " + strconv.Itoa(n) + " bytes: " + err.Error()})
			return
		}
	}
	if end {
		se.closeStdinLocked()
	}
	writeJSON(w, httpd.StatusOK, wire.StdioWriteResponse{OK: true, BytesWritten: n})
}

// resizeSession sets a terminal session's size; the program gets SIGWINCH.
func (s *Server) resizeSession(w httpd.ResponseWriter, r *httpd.Request, se *session) {
	if se.tty == nil {
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeNotATerminal, Message: "the session has no terminal to size"})
		return
	}
	var req wire.ResizeRequest
	if err := s.readBody(r, &req); err != nil || req.Rows == 0 || req.Cols == 0 || req.Rows > wire.MaxTermSize || req.Cols > wire.MaxTermSize {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidSize, Message: "rows and cols are from 1 to " + strconv.Itoa(wire.MaxTermSize)})
		return
	}
	if err := setWinsize(se.tty, req.Rows, req.Cols); err != nil {
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeStdioNotRunning, Message: err.Error()})
		return
	}
	w.WriteHeader(httpd.StatusNoContent)
}

// openTerminal opens a terminal pair whose controlling side polls, so
// that a write to a program that reads nothing gives up at its deadline:
// creack/pty reaches the descriptor through File.Fd, which makes it
// blocking for good, so the side the agent keeps is a non-blocking
// duplicate.
func openTerminal() (master, slave *os.File, err error) {
	m, slave, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err == nil {
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		slave.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), m.Name()), slave, nil
}

// setWinsize sizes a terminal through its descriptor without File.Fd
// (which would make it blocking).
func setWinsize(f *os.File, rows, cols uint16) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}
