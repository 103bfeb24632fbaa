package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server/api"
)

// A session's timeout is the agent's to keep; the daemon holds it too, as
// it holds a command's: a timeout's grace after it, a session the agent
// still calls running is killed through the agent, and a sandbox whose
// agent neither answers nor kills it is torn down ("deadline"). Paused or
// stopped, nothing of the sandbox runs: the daemon looks again a grace
// after.

// maxSessionAnswer bounds the agent's answer to a session's start that
// the daemon reads for its timeout (a longer one passes on unread).
const maxSessionAnswer = 1 << 20

// handleSessionStart serves POST /v1/sandboxes/ID/sessions.
func (s *Server) handleSessionStart(w http.ResponseWriter, r *http.Request) {
	s.inAgent(w, r, func(e *entry) { s.forwardSessionStart(w, r, e) })
}

// forwardSessionStart forwards a session's start to the agent and holds
// the deadline of one started with a timeout.
func (s *Server) forwardSessionStart(w http.ResponseWriter, r *http.Request, e *entry) {
	e.agent.send(w, r, http.MethodPost, wire.RouteSessions, r.URL.RawQuery, true, func(resp *http.Response) error {
		if resp.StatusCode != http.StatusCreated {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxSessionAnswer+1))
		if err != nil {
			return err
		}
		// What was read goes on first, then whatever was not.
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
		var ses wire.Session
		if len(b) <= maxSessionAnswer && json.Unmarshal(b, &ses) == nil && ses.TimeoutMs > 0 && ses.State == wire.SessionRunning {
			s.holdSessionDeadline(e, ses, sessionTimeout(ses))
		}
		return nil
	})
}

// maxHeldDeadlines is how many session deadlines the daemon holds for a
// sandbox before it asks the agent which of them still run: sessions
// started and forgotten would otherwise leave one each, for up to a
// month.
const maxHeldDeadlines = 256

// heldDeadlines are the session deadlines the daemon holds for a sandbox,
// by session id.
type heldDeadlines struct {
	mu sync.Mutex
	m  map[string]*heldDeadline
}

// heldDeadline is one: what the check needs of the session, and its timer.
type heldDeadline struct {
	startedAt, timeoutMs int64
	timer                *time.Timer
}

// stopAll drops every deadline held (the sandbox is gone).
func (h *heldDeadlines) stopAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.m {
		d.timer.Stop()
	}
	h.m = nil
}

// drop drops the deadline held for session sid, if it is d.
func (h *heldDeadlines) drop(sid string, d *heldDeadline) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[sid] == d {
		delete(h.m, sid)
	}
}

// holdSessionDeadline looks at session ses of e after left (the time its
// timeout has left) and the host's grace. Past maxHeldDeadlines, the
// deadlines of sessions the agent no longer runs are dropped first.
func (s *Server) holdSessionDeadline(e *entry, ses wire.Session, left time.Duration) {
	e.deadlines.mu.Lock()
	n := len(e.deadlines.m)
	e.deadlines.mu.Unlock()
	if n >= maxHeldDeadlines {
		s.pruneDeadlines(e)
	}
	d := &heldDeadline{startedAt: ses.StartedAt, timeoutMs: ses.TimeoutMs}
	sid, grace := ses.ID, e.sb.HostGrace()
	e.deadlines.mu.Lock()
	defer e.deadlines.mu.Unlock()
	if old := e.deadlines.m[sid]; old != nil {
		old.timer.Stop()
	}
	if e.deadlines.m == nil {
		e.deadlines.m = map[string]*heldDeadline{}
	}
	e.deadlines.m[sid] = d
	d.timer = time.AfterFunc(max(0, left)+grace, func() { s.sessionDeadline(e, sid, d) })
}

// pruneDeadlines drops the deadlines of e's sessions that its agent does
// not run.
func (s *Server) pruneDeadlines(e *entry) {
	ctx, cancel := context.WithTimeout(context.Background(), e.sb.HostGrace())
	defer cancel()
	list, err := e.sb.Client().Sessions(ctx)
	if err != nil {
		return // each is looked at when it falls due
	}
	running := map[string]int64{}
	for _, ses := range list {
		if ses.State == wire.SessionRunning {
			running[ses.ID] = ses.StartedAt
		}
	}
	e.deadlines.mu.Lock()
	defer e.deadlines.mu.Unlock()
	for sid, d := range e.deadlines.m {
		if started, ok := running[sid]; !ok || started != d.startedAt {
			d.timer.Stop()
			delete(e.deadlines.m, sid)
		}
	}
}

// sessionDeadline ends session sid of e, held as d, if its agent has not,
// as the package comment says.
func (s *Server) sessionDeadline(e *entry, sid string, d *heldDeadline) {
	if s.stopping() {
		return // the next daemon holds it (holdSessionDeadlines)
	}
	grace := e.sb.HostGrace()
	s.mu.Lock()
	state := e.rec.State
	s.mu.Unlock()
	switch state {
	case api.StateRunning:
	case api.StatePaused, api.StateSuspended, api.StateCreating:
		e.deadlines.mu.Lock()
		if e.deadlines.m[sid] == d {
			d.timer.Reset(grace)
		}
		e.deadlines.mu.Unlock()
		return
	default:
		e.deadlines.drop(sid, d)
		return // gone
	}
	e.deadlines.drop(sid, d)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	c := e.sb.Client()
	now, err := c.Session(ctx, sid)
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status == http.StatusNotFound || err == nil && (now.State != wire.SessionRunning || now.StartedAt != d.startedAt) {
		return // ended (by its timeout or otherwise), forgotten, or another of the name
	}
	if err == nil {
		k, err := c.KillSession(ctx, sid, "KILL", 0)
		if err == nil && k.State == wire.SessionExited {
			s.log.Warn("a session ran past its timeout and the host's grace; the daemon killed it", "sandbox", e.rec.ID, "session", sid, "timeoutMs", d.timeoutMs)
			return
		}
	}
	s.log.Warn("a session ran past its timeout and the agent could not end it; tearing the sandbox down", "sandbox", e.rec.ID, "session", sid, "err", err)
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	if err := s.destroy(dctx, e, "deadline"); err != nil {
		s.log.Warn("teardown past a session's deadline failed; the reaper retries", "sandbox", e.rec.ID, "err", err)
	}
}

// holdSessionDeadlines holds the deadlines of the sessions with timeouts
// that es's agents run, for a daemon that adopted them at its start: a
// few sandboxes at a time, each given a few seconds to answer.
func (s *Server) holdSessionDeadlines(es []*entry) {
	fewAtOnce(es, 8, func(e *entry) {
		if !e.sb.HasFeature("session-timeout") {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		list, err := e.sb.Client().Sessions(ctx)
		if err != nil {
			s.log.Warn("the sessions of an adopted sandbox, for their timeouts", "sandbox", e.rec.ID, "err", err)
			return
		}
		for _, ses := range list {
			if ses.TimeoutMs > 0 && ses.State == wire.SessionRunning {
				// The agent's clock says how long it has run.
				left := sessionTimeout(ses) - time.Since(time.UnixMilli(ses.StartedAt))
				s.holdSessionDeadline(e, ses, left)
			}
		}
	})
}

// stopping says the daemon is shutting down.
func (s *Server) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// sessionTimeout is ses's timeout, as far as the agent may set one (its
// answer is the sandbox's word).
func sessionTimeout(ses wire.Session) time.Duration {
	return time.Duration(min(ses.TimeoutMs, wire.MaxSessionTimeoutMs)) * time.Millisecond
}
