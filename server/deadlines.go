package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
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
			s.holdSessionDeadline(e.rec.ID, e.sb.HostGrace(), ses, time.Duration(ses.TimeoutMs)*time.Millisecond)
		}
		return nil
	})
}

// holdSessionDeadline looks at session ses of sandbox id after left (the
// time its timeout has left) and the host's grace. (By the sandbox's id,
// not its entry, which a timer of a month must not keep.)
func (s *Server) holdSessionDeadline(id string, grace time.Duration, ses wire.Session, left time.Duration) {
	time.AfterFunc(max(0, left)+grace, func() { s.sessionDeadline(id, grace, ses) })
}

// sessionDeadline ends session ses of sandbox id if its agent has not,
// as the package comment says.
func (s *Server) sessionDeadline(id string, grace time.Duration, ses wire.Session) {
	if s.stopping() {
		return // the next daemon holds it (holdSessionDeadlines)
	}
	s.mu.Lock()
	e := s.live[id]
	state := ""
	if e != nil && e.sb != nil {
		state = e.rec.State
	}
	s.mu.Unlock()
	switch state {
	case api.StateRunning:
	case api.StatePaused, api.StateSuspended, api.StateCreating:
		s.holdSessionDeadline(id, grace, ses, 0)
		return
	default:
		return // gone
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	c := e.sb.Client()
	now, err := c.Session(ctx, ses.ID)
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status == http.StatusNotFound || err == nil && (now.State != wire.SessionRunning || now.StartedAt != ses.StartedAt) {
		return // ended (by its timeout or otherwise), forgotten, or another of the name
	}
	if err == nil {
		k, err := c.KillSession(ctx, ses.ID, "KILL", 0)
		if err == nil && k.State == wire.SessionExited {
			s.log.Warn("a session ran past its timeout and the host's grace; the daemon killed it", "sandbox", id, "session", ses.ID, "timeoutMs", ses.TimeoutMs)
			return
		}
	}
	s.log.Warn("a session ran past its timeout and the agent could not end it; tearing the sandbox down", "sandbox", id, "session", ses.ID, "err", err)
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	if err := s.destroy(dctx, e, "deadline"); err != nil {
		s.log.Warn("teardown past a session's deadline failed; the reaper retries", "sandbox", id, "err", err)
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
				left := time.Duration(ses.TimeoutMs)*time.Millisecond - time.Since(time.UnixMilli(ses.StartedAt))
				s.holdSessionDeadline(e.rec.ID, e.sb.HostGrace(), ses, left)
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
