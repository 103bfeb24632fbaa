package server

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
)

// The daemon reads each running sandbox's metrics every MetricsInterval
// and keeps MetricsHistory of them, for GET /v1/sandboxes/ID/metrics/history
// (E2B's get_metrics over a window). The readings live in the daemon's
// memory: a restart begins them again.
const (
	DefaultMetricsInterval = 5 * time.Second
	DefaultMetricsHistory  = 15 * time.Minute
	// MaxMetricsReadings bounds what one sandbox keeps (history over
	// interval), whatever the operator sets.
	MaxMetricsReadings = 10000
	// metricsReaders is how many sandboxes are read at once.
	metricsReaders = 4
)

// history is a sandbox's readings, oldest first, at most a ring's worth.
type history struct {
	mu   sync.Mutex
	ring []*sandbox.Usage
	next int // where the next reading goes, once the ring is full
}

func (h *history) add(u *sandbox.Usage, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ring) < most {
		h.ring = append(h.ring, u)
		return
	}
	h.ring[h.next] = u
	h.next = (h.next + 1) % len(h.ring)
}

// between returns the readings taken from start to end, oldest first,
// with the one before start (nil if none), which the first one's CPU use
// is measured from.
func (h *history) between(start, end time.Time) (before *sandbox.Usage, in []*sandbox.Usage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.ring)
	for i := range n {
		u := h.ring[(h.next+i)%n]
		switch {
		case u.At.Before(start):
			before = u
		case !u.At.After(end):
			in = append(in, u)
		}
	}
	return before, in
}

// sampleOnce reads every running sandbox once, a few at a time, each
// within one interval. A reading is not activity: it keeps no sandbox
// from its idle timeout.
func (s *Server) sampleOnce() {
	es := s.sandboxes(func(e *entry) bool { return e.rec.State == api.StateRunning })
	most := s.readingsKept()
	fewAtOnce(es, metricsReaders, func(e *entry) {
		ctx, cancel := context.WithTimeout(context.Background(), min(s.cfg.MetricsInterval, usageTimeout))
		defer cancel()
		u, err := e.sb.Usage(ctx)
		if err != nil {
			return // paused meanwhile, gone, or an agent without usage: a gap
		}
		e.history.add(u, most)
		e.noteUsage(u)
	})
}

// fewAtOnce calls fn for each of es, n at once, and returns when all
// have returned.
func fewAtOnce(es []*entry, n int, fn func(*entry)) {
	slots := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, e := range es {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			fn(e)
		}()
	}
	wg.Wait()
}

// readingsKept is how many readings a sandbox keeps.
func (s *Server) readingsKept() int {
	return max(1, min(MaxMetricsReadings, int(s.cfg.MetricsHistory/s.cfg.MetricsInterval)))
}

// noteUsage makes u the reading the next one's CPU use is measured from,
// unless the last is too recent for that.
func (e *entry) noteUsage(u *sandbox.Usage) {
	if prev := e.usage.Load(); prev == nil || u.At.Sub(prev.At) >= minCPUWindow {
		e.usage.Store(u)
	}
}

// handleMetricsHistory answers GET /v1/sandboxes/ID/metrics/history
// ?start=&end= (RFC 3339 or Unix seconds; the sandbox's create and now
// by default; a start after an end given is refused): the readings the daemon took in that window, oldest
// first, each CPU use measured from the reading before it. A sandbox
// paused, stopped or lost keeps the readings it had.
func (s *Server) handleMetricsHistory(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	start, end := time.Time{}, time.Now()
	for name, at := range map[string]*time.Time{"start": &start, "end": &end} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		t, err := parseInstant(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, name+" must be a time in RFC 3339 (2026-12-06T10:00:00Z) or Unix seconds")
			return
		}
		*at = t
	}
	if r.URL.Query().Get("end") != "" && end.Before(start) {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "start is after end")
		return
	}
	s.mu.Lock()
	created := e.rec.CreatedAt
	s.mu.Unlock()
	limits := e.sb.Spec().Limits
	prev, in := e.history.between(start, end)
	out := api.MetricsHistory{IntervalMs: max(0, s.cfg.MetricsInterval.Milliseconds()), Metrics: make([]api.Metrics, 0, len(in))}
	for _, u := range in {
		out.Metrics = append(out.Metrics, metricsOf(limits, u, prev, created))
		prev = u
	}
	writeJSON(w, http.StatusOK, out)
}

// parseInstant reads a time as RFC 3339 or as Unix seconds.
func parseInstant(v string) (time.Time, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n < 1<<40 {
		return time.Unix(n, 0), nil
	}
	return time.Parse(time.RFC3339Nano, v)
}
