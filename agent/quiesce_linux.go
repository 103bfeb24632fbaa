package agent

import (
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"golang.org/x/sys/unix"
)

func (s *Server) handleQuiesce(w httpd.ResponseWriter, r *httpd.Request) {
	var req wire.QuiesceRequest
	if err := s.readBody(r, &req); err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
		return
	}
	grace, ok := boundedMs(req.GraceMs, wire.DefaultQuiesceGraceMs, wire.MaxQuiesceGraceMs)
	if !ok {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: "graceMs must be from 0 to " + strconv.Itoa(wire.MaxQuiesceGraceMs)})
		return
	}
	s.mu.Lock()
	if s.quiescing {
		s.mu.Unlock()
		writeJSON(w, httpd.StatusConflict, wire.ErrorBody{Error: wire.CodeQuiesceInProgress})
		return
	}
	s.quiescing = true
	s.mu.Unlock()
	res := s.quiesce(grace, time.Now().Add(wire.QuiesceDeadlineMs*time.Millisecond))
	s.mu.Lock()
	s.quiescing = false
	s.mu.Unlock()
	if !res.OK {
		writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeQuiesceFailed,
			Message: "processes survived SIGKILL: " + pidList(res.Survived)})
		return
	}
	writeJSON(w, httpd.StatusOK, res)
}

func pidList(pids []int) string {
	var b []byte
	for i, p := range pids {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, int64(p), 10)
	}
	return string(b)
}

// quiescing reports a quiesce in progress: nothing starts meanwhile.
func (s *Server) quiescingNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quiescing
}

// quiesce stops everything the agent runs: executions in flight are ended
// as cancelled first (so each settles as such), then every process below
// the agent, sessions and reparented orphans included, in rounds of TERM,
// grace and KILL until a scan finds nothing.
func (s *Server) quiesce(grace time.Duration, deadline time.Time) wire.QuiesceResponse {
	s.cancelRunning()
	res := wire.QuiesceResponse{}
	self := os.Getpid()
	for res.Rounds < wire.QuiesceMaxRounds && time.Now().Before(deadline) {
		pids := descendants(self)
		if len(pids) == 0 {
			res.OK = true
			return res
		}
		res.Rounds++
		res.Stopped += len(pids)
		for _, pid := range pids {
			_ = unix.Kill(pid, syscall.SIGTERM)
		}
		end := minTime(deadline, time.Now().Add(grace))
		for time.Now().Before(end) && len(descendants(self)) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		killDescendants(self, minTime(deadline, time.Now().Add(s.cfg.CancelConfirmTimeout)))
	}
	res.Survived = descendants(self)
	res.OK = len(res.Survived) == 0
	return res
}

func (s *Server) handleFlush(w httpd.ResponseWriter, r *httpd.Request) {
	var req wire.FlushRequest
	if err := s.readBody(r, &req); err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
		return
	}
	timeout, ok := boundedMs(req.TimeoutMs, wire.DefaultFlushTimeoutMs, wire.MaxFlushTimeoutMs)
	if !ok {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidTimeout, Message: "timeoutMs must be from 0 to " + strconv.Itoa(wire.MaxFlushTimeoutMs)})
		return
	}
	synced, ok := s.flush(timeout)
	if !ok {
		writeJSON(w, httpd.StatusGatewayTimeout, wire.ErrorBody{Error: wire.CodeFlushUnconfirmed, Message: "syncfs did not return within " + timeout.String() + "; the writes may still be in flight"})
		return
	}
	writeJSON(w, httpd.StatusOK, wire.FlushResponse{OK: true, Synced: synced})
}

// flush runs syncfs on the file system of each writable root (once per
// file system), within timeout; false when it did not return in time.
func (s *Server) flush(timeout time.Duration) ([]string, bool) {
	done := make(chan []string, 1)
	go func() {
		seen := map[uint64]bool{}
		synced := []string{}
		for _, root := range append([]string{s.cfg.Workspace}, s.cfg.WriteRoots...) {
			fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && !seen[st.Dev] {
				seen[st.Dev] = true
				if unix.Syncfs(fd) == nil {
					synced = append(synced, root)
				}
			}
			unix.Close(fd)
		}
		done <- synced
	}()
	select {
	case synced := <-done:
		return synced, true
	case <-time.After(timeout):
		return nil, false
	}
}

// boundedMs is a request's milliseconds as a duration: def when 0, false
// when outside 0 to most.
func boundedMs(ms, def, most int64) (time.Duration, bool) {
	if ms == 0 {
		ms = def
	}
	return time.Duration(ms) * time.Millisecond, ms >= 0 && ms <= most
}
