package server

import (
	"context"
	"fmt"
	"time"

	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
)

// watch records the sandbox lost, with the reason, should its agent exit
// while it is running or paused (a teardown marks it destroying first);
// a sandbox on a disk is stopped instead, its files kept, and watched
// again once it resumes.
func (s *Server) watch(e *entry) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for {
			select {
			case <-e.sb.Exited():
			case <-e.rewatch:
				continue // a new instance: its own exit
			case <-s.stop:
				return
			}
			s.mu.Lock()
			st := e.rec.State
			s.mu.Unlock()
			if st != api.StateRunning && st != api.StatePaused && st != api.StateSuspended {
				return
			}
			if st == api.StateSuspended && e.sb.OnDisk() {
				// (A stopped disk sandbox's Exited is a new channel, and
				// its resume wakes this loop: the old one's end is not
				// its.)
				continue
			}
			if !e.sb.OnDisk() {
				break
			}
			// A sandbox on a disk is given back, its files kept, and
			// watched again once it resumes.
			why := "the sandbox's agent exited; its workspace is kept"
			if d := e.sb.Diagnostics(); d != "" {
				why += ": " + lastLine(d)
			}
			if s.giveBack(e, why) == nil {
				continue
			}
			break
		}
		s.mu.Lock()
		if st := e.rec.State; st != api.StateRunning && st != api.StatePaused && st != api.StateSuspended {
			s.mu.Unlock()
			return
		}
		e.rec.State, e.rec.Reason = api.StateLost, "the sandbox's agent exited"
		if d := e.sb.Diagnostics(); d != "" {
			e.rec.Reason += ": " + lastLine(d)
		}
		rec := *e.rec
		s.mu.Unlock()
		if err := s.store.putSandbox(&rec); err != nil {
			s.log.Error("registry write failed", "sandbox", rec.ID, "err", err)
		}
		s.metrics.reaped.With("lost").Inc()
		s.emit(api.EventLost, &rec, map[string]any{"reason": rec.Reason})
	}()
}

// newEntry is a live sandbox's entry.
func newEntry(rec *record, sb *sandbox.Sandbox) *entry {
	e := &entry{rec: rec, sb: sb, agent: newAgentProxy(sb.Client), portConns: make(chan struct{}, maxPortConns), rewatch: make(chan struct{}, 1)}
	if rec.Spec.PersistentWorkspace {
		e.disk = rec.Spec.Limits.DiskBytes
	}
	return e
}

// resumed tells the entry's watch that the sandbox runs on a new
// instance.
func (e *entry) resumed() {
	select {
	case e.rewatch <- struct{}{}:
	default:
	}
}

// giveBack suspends a sandbox on a disk whose instance is gone (exited,
// or not answering), keeping its files, and records why.
func (s *Server) giveBack(e *entry, why string) error {
	s.mu.Lock()
	st := e.rec.State
	s.mu.Unlock()
	if st != api.StateRunning && st != api.StatePaused {
		return fmt.Errorf("the sandbox is %s", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.sb.GiveBack(ctx); err != nil {
		s.log.Warn("a persistent sandbox without its agent not given back", "sandbox", e.rec.ID, "err", err)
		return err
	}
	return s.stopped(e, why)
}

// stopIdle suspends a persistent sandbox the reaper found idle (its
// agent asked to quiesce and flush first) or, on a disk, without an
// agent that answers.
func (s *Server) stopIdle(e *entry, reason string) {
	if reason == "lost" {
		_ = s.giveBack(e, "the sandbox's agent stopped answering; its workspace is kept")
		return
	}
	s.mu.Lock()
	st := e.rec.State
	s.mu.Unlock()
	if st != api.StateRunning {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.sb.Suspend(ctx); err != nil {
		s.log.Warn("an idle persistent sandbox not stopped; will retry", "sandbox", e.rec.ID, "err", err)
		return
	}
	if err := s.stopped(e, "idle"); err != nil {
		s.log.Error("registry write failed", "sandbox", e.rec.ID, "err", err)
	}
}
