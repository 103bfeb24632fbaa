package agent

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"golang.org/x/sys/unix"
)

// run spawns the command, streams its output and settles its result. It
// runs on the /execute handler's goroutine, which therefore owns the
// response until the last event is written.
func (s *Server) run(w httpd.ResponseWriter, r *httpd.Request, e *execution, q *execRequest, dir string) {
	command, argv, env, stdinText, timeout, maxOut := q.command, q.argv, q.env, q.stdin, q.timeout, q.maxOut
	out := newEventStream(w)
	fail := func(err error) {
		s.mu.Lock()
		if e.state == stateTerminal { // cancelled while it was starting
			st := e.outcome
			s.mu.Unlock()
			writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeExecutionCancelled, State: st})
			return
		}
		if e.tracked {
			s.rememberTerminalLocked(e, wire.OutcomeFailed, nil, err.Error())
		}
		e.state = stateTerminal
		close(e.done)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(httpd.StatusOK)
		out.send(wire.Event{Type: wire.EventError, Error: err.Error()})
	}
	path, err := lookPath(command, env, dir)
	if err != nil {
		fail(err)
		return
	}

	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		fail(err)
		return
	}
	defer stdoutR.Close()
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutW.Close()
		fail(err)
		return
	}
	defer stderrR.Close()
	stdin := s.devNull
	var stdinW *os.File
	if e.stdio || stdinText != nil {
		var stdinR *os.File
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			stdoutW.Close()
			stderrW.Close()
			fail(err)
			return
		}
		defer stdinR.Close()
		stdin = stdinR
	}
	inodes := [2]uint64{pipeInode(stdoutW), pipeInode(stderrW)}

	// Admission and spawn are one step under the lock, so a cancel lands
	// either before (the reservation ends, nothing runs) or after (the
	// process exists and is stopped).
	s.mu.Lock()
	if e.state == stateTerminal {
		st := e.outcome
		s.mu.Unlock()
		stdoutW.Close()
		stderrW.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeExecutionCancelled, State: st})
		return
	}
	oomBefore := s.oomKills()
	pid, exited, err := s.reaper.spawn(path, argv, env, dir, []uintptr{stdin.Fd(), stdoutW.Fd(), stderrW.Fd()})
	if err != nil {
		s.mu.Unlock()
		stdoutW.Close()
		stderrW.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		fail(spawnError(command, err))
		return
	}
	e.state, e.started, e.pgid, e.pipes, e.out = stateRunning, true, pid, inodes, out
	if e.stdio {
		e.stdin = stdinW
	}
	s.running[e] = struct{}{}
	s.mu.Unlock()
	// The child holds its own copies; dropping ours lets EOF and EPIPE
	// arrive when it exits.
	stdoutW.Close()
	stderrW.Close()
	if stdin != s.devNull {
		stdin.Close()
	}
	// The command holds a lease of its own until it settles.
	release := s.acquireActivity()
	defer release()

	s.nextLease(w, r)
	beat := heartbeatAsked(r)
	if beat > 0 && !e.stdio {
		w.Header().Set(wire.HeartbeatHeader, strconv.FormatInt(beat.Milliseconds(), 10))
	}
	w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(httpd.StatusOK)
	// The caller learns at once that the command started (a gateway passes
	// the execution id on in the headers), not at its first output.
	out.flush()

	timer := time.AfterFunc(timeout, func() {
		if _, err := s.terminate(e, causeTimeout); err != nil {
			s.retire(err)
		}
	})
	defer timer.Stop()

	stopHeartbeat := make(chan struct{})
	if beat > 0 && !e.stdio {
		go func() {
			t := time.NewTicker(beat)
			defer t.Stop()
			for {
				select {
				case <-stopHeartbeat:
					return
				case <-t.C:
					out.heartbeat([]byte(`{"type":"` + wire.EventHeartbeat + "\"}\n"))
				}
			}
		}()
	}
	if e.stdio {
		out.send(wire.Event{Type: wire.EventStdioStarted, Version: 1})
		go s.stdioWatch(r, e, out, stopHeartbeat)
	} else if stdinText != nil {
		go func() {
			_, _ = stdinW.Write([]byte(*stdinText))
			stdinW.Close()
		}()
	}

	var pumps sync.WaitGroup
	clips := [2]*outputClip{{max: maxOut, base64: q.rawOutput}, {max: maxOut, base64: q.rawOutput}}
	for i, f := range []*os.File{stdoutR, stderrR} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			s.pump(f, i, e.stdio, clips[i], out, e.kept)
		}()
	}

	ws := <-exited
	s.mu.Lock()
	e.exitWS = ws
	if e.state == stateRunning {
		e.state = stateExited
	}
	s.mu.Unlock()
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(wire.LeaderDrain):
		// The leader is gone and what it left holds the output open (a
		// background child, one that called setsid). A strict command
		// ends with its leader, as a container with its first process:
		// its group goes, then whatever still holds its pipes.
		s.mu.Lock()
		stop := e.policy == wire.PolicyStrict && e.cause == ""
		if stop {
			e.leftovers = true
		}
		pgid, pipes := e.pgid, e.pipes
		s.mu.Unlock()
		if stop {
			deadline := time.Now().Add(s.cfg.CancelConfirmTimeout)
			if err := s.stopGroup(pgid, deadline); err != nil {
				s.retire(err)
				return
			}
			for _, pid := range pipeHolders(pipes) {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		<-drained
	}
	close(stopHeartbeat)
	if e.kept != nil {
		e.kept.close()
	}

	if err := s.confirmGroupAfterClose(e); err != nil {
		s.retire(err)
		// Never report a result for a command whose end is unknown.
		return
	}
	res := &wire.Result{
		LeftoversStopped: e.leftovers,
		ExitCode:         -1,
		DurationMs:       time.Since(e.startedAt).Milliseconds(),
		StdoutTruncated:  clips[0].truncated,
		StderrTruncated:  clips[1].truncated,
	}
	if ws.Exited() {
		res.ExitCode = ws.ExitStatus()
	} else if ws.Signaled() {
		res.Signal = signalName(ws.Signal())
	}
	if after := s.oomKills(); after > oomBefore {
		res.OOMKills = after - oomBefore
	}
	s.mu.Lock()
	res.TimedOut = e.cause == causeTimeout
	outcome := wire.OutcomeCompleted
	if e.cause == causeCancelled {
		outcome = wire.OutcomeCancelled
	}
	if e.cause != "" {
		s.sweepOrphansLocked(e)
	}
	s.settleLocked(e, outcome, res)
	stdinToClose := stdinW
	s.mu.Unlock()
	if e.stdio && stdinToClose != nil {
		e.stdinMu.Lock()
		stdinToClose.Close()
		e.stdinMu.Unlock()
	}
	out.sendLine(wire.AppendResultEvent(nil, res))
}

func (s *Server) settleLocked(e *execution, outcome string, res *wire.Result) {
	if e.settled {
		return
	}
	e.settled = true
	delete(s.running, e)
	s.idleSince = time.Now()
	if e.tracked {
		s.rememberTerminalLocked(e, outcome, res, "")
	} else {
		e.state, e.outcome, e.result = stateTerminal, outcome, res
	}
	close(e.done)
}

// confirmGroupAfterClose runs once the leader has exited and both pipes are
// at EOF. Members of the group that outlive their leader belong to the
// execution: a computer-lifetime command that succeeded hands them over;
// otherwise they are stopped here, rather than left running.
func (s *Server) confirmGroupAfterClose(e *execution) error {
	pgid := e.pgid
	if !groupAlive(pgid) {
		return nil
	}
	s.mu.Lock()
	ws := e.exitWS
	if e.policy == wire.PolicyComputerLifetime && e.cause == "" && ws.Exited() && ws.ExitStatus() == 0 {
		e.handoff = true
		s.handoffs[pgid] = struct{}{}
	}
	handoff, cause := e.handoff, e.cause
	s.mu.Unlock()
	if handoff {
		return nil
	}
	deadline := time.Now().Add(s.cfg.CancelConfirmTimeout)
	if cause != "" {
		// A termination is already signalling this group.
		if waitGroupGone(pgid, deadline) {
			return nil
		}
	} else if waitGroupGone(pgid, time.Now().Add(25*time.Millisecond)) {
		return nil
	} else {
		s.mu.Lock()
		e.leftovers = true
		s.mu.Unlock()
	}
	return s.stopGroup(pgid, deadline)
}

// maxPumpBuffer is the most an output stream reads at once: a pipe's
// default capacity.
const maxPumpBuffer = 64 << 10

// pump copies one output pipe to the stream until EOF.
func (s *Server) pump(f *os.File, stream int, stdio bool, clip *outputClip, out *eventStream, kept *retained) {
	names := [2]string{"stdout", "stderr"}
	types := [2]string{wire.EventStdout, wire.EventStderr}
	// The buffer starts at a page and doubles while reads fill it, up to a
	// pipe's default capacity: most commands write little, and each of
	// their streams then costs the agent a page rather than 64 KiB (that
	// is zeroed, faulted in and held while the command runs).
	buf := make([]byte, 4<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 && kept != nil {
			kept.write(byte(stream+1), buf[:n])
		}
		if n > 0 {
			switch {
			case stdio:
				out.sendBase64(wire.EventStdioData, names[stream], buf[:n])
			case clip.base64:
				if b := clip.clip(buf[:n]); len(b) > 0 {
					out.sendBase64(types[stream], "", b)
				}
			default:
				if text := clip.take(buf[:n]); text != "" {
					out.send(wire.Event{Type: types[stream], Data: text})
				}
			}
		}
		if err != nil {
			break
		}
		if n == len(buf) && len(buf) < maxPumpBuffer {
			buf = make([]byte, 2*len(buf))
		}
	}
	if text := clip.flush(); text != "" && !stdio {
		out.send(wire.Event{Type: types[stream], Data: text})
	}
}

// stdioWatch sends heartbeats on a stdio stream and treats the caller going
// away as a cancel: in stdio mode the stream is the session.
func (s *Server) stdioWatch(r *httpd.Request, e *execution, out *eventStream, stop <-chan struct{}) {
	beat, _ := json.Marshal(wire.Event{Type: wire.EventStdioHeartbeat, Version: 1})
	beat = append(beat, '\n')
	t := time.NewTicker(s.cfg.StdioHeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			out.heartbeat(beat)
		case <-r.Context().Done():
			if _, err := s.terminate(e, causeCancelled); err != nil {
				s.retire(err)
			}
			return
		}
	}
}

func (s *Server) handleStdioWrite(w httpd.ResponseWriter, r *httpd.Request) {
	var body struct {
		ExecutionID any  `json:"executionId"`
		Data        any  `json:"data"`
		End         bool `json:"end"`
	}
	if err := s.readBody(r, &body); err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
		return
	}
	id, _ := body.ExecutionID.(string)
	data, ok := body.Data.(string)
	if !validExecutionID(id) || !ok || len(data) > wire.StdioWriteMaxChars {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidStdioWrite})
		return
	}
	bytes, err := base64.StdEncoding.DecodeString(data)
	if err != nil || base64.StdEncoding.EncodeToString(bytes) != data {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidStdioBytes})
		return
	}
	s.mu.Lock()
	e := s.executions[id]
	var stdin *os.File
	if e != nil && e.stdio && e.state == stateRunning {
		stdin = e.stdin
	}
	s.mu.Unlock()
	if stdin == nil {
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeStdioNotRunning})
		return
	}
	e.stdinMu.Lock()
	// A command that stops reading cannot hold this request forever.
	_ = stdin.SetWriteDeadline(time.Now().Add(s.cfg.CancelConfirmTimeout))
	_, err = stdin.Write(bytes)
	if err == nil && body.End {
		// End of input: the command reads EOF; the execution no longer
		// takes writes.
		s.mu.Lock()
		if e.stdin == stdin {
			e.stdin = nil
		}
		s.mu.Unlock()
		err = stdin.Close()
	}
	e.stdinMu.Unlock()
	if err != nil {
		writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeStdioDeliveryUnknown})
		return
	}
	writeJSON(w, httpd.StatusOK, wire.StdioWriteResponse{OK: true, BytesWritten: len(bytes)})
}

func pipeInode(f *os.File) uint64 {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return 0
	}
	return st.Ino
}

// pipeHolders lists processes that hold one of the given pipes open: the
// holders of a command's output belong to that command even after they
// leave its process group.
func pipeHolders(inodes [2]uint64) []int {
	want := map[string]bool{}
	for _, ino := range inodes {
		if ino != 0 {
			want["pipe:["+strconv.FormatUint(ino, 10)+"]"] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	self := os.Getpid()
	procs, _ := os.ReadDir("/proc")
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, fd := range fds {
			if link, err := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); err == nil && want[link] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// spawnError words a failed exec as "spawn CMD ENOENT: no such file or
// directory", the shape callers of the reference already match on.
func spawnError(command string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Errorf("spawn %s %s: %v", command, unix.ErrnoName(errno), errno)
	}
	return fmt.Errorf("spawn %s: %v", command, err)
}

func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(sig))
}

// heartbeatAsked is the interval a request's Cordon-Heartbeat asks for; 0
// when it asks for none, or for one out of 1 to 60 s.
func heartbeatAsked(r *httpd.Request) time.Duration {
	ms, err := strconv.ParseInt(r.Header.Get(wire.HeartbeatHeader), 10, 64)
	if err != nil || ms < 1000 || ms > 60000 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
