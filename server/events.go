package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/server/api"
)

// hub fans lifecycle events out to subscribers. Each subscriber has a
// bounded queue; one that falls that far behind is dropped (its stream
// ends with an "overflow" comment) rather than slowing the daemon down.
type hub struct {
	mu     sync.Mutex
	seq    uint64
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	tenant string
	ch     chan api.Event
	gone   chan struct{} // closed when dropped
	once   sync.Once
}

const subscriberQueue = 256

func newHub() *hub { return &hub{subs: map[*subscriber]struct{}{}} }

func (h *hub) publish(ev api.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	ev.Seq = h.seq
	for sub := range h.subs {
		if sub.tenant != ev.Tenant {
			continue
		}
		select {
		case sub.ch <- ev:
		default:
			delete(h.subs, sub)
			sub.drop()
		}
	}
}

func (sub *subscriber) drop() { sub.once.Do(func() { close(sub.gone) }) }

func (h *hub) subscribe(tenant string, max int) (*subscriber, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for sub := range h.subs {
		if sub.tenant == tenant {
			n++
		}
	}
	if h.closed || n >= max {
		return nil, false
	}
	sub := &subscriber{tenant: tenant, ch: make(chan api.Event, subscriberQueue), gone: make(chan struct{})}
	h.subs[sub] = struct{}{}
	return sub, true
}

func (h *hub) unsubscribe(sub *subscriber) {
	h.mu.Lock()
	delete(h.subs, sub)
	h.mu.Unlock()
	sub.drop()
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for sub := range h.subs {
		delete(h.subs, sub)
		sub.drop()
	}
}

// emit publishes an event about a sandbox to its tenant.
func (s *Server) emit(typ string, rec *record, data map[string]any) {
	s.events.publish(api.Event{Type: typ, Sandbox: rec.ID, Tenant: rec.Tenant, Time: time.Now().UTC(), Data: data})
}

// EndStreams ends every event stream (their subscribers are dropped), so
// that an HTTP server shutting down does not wait for them (register it
// with http.Server.RegisterOnShutdown).
func (s *Server) EndStreams() { s.events.close() }

// EgressRecord adds a refused connection to its sandbox's events (wire it
// as the egress proxy's Config.OnRecord). A sandbox of no tenant here (a
// pool's, not yet claimed) has nobody to tell.
func (s *Server) EgressRecord(r egress.Record) {
	if r.Decision != "refused" {
		return
	}
	s.mu.Lock()
	e := s.live[r.Sandbox]
	s.mu.Unlock()
	if e == nil || e.rec == nil {
		return
	}
	s.emit(api.EventEgressRefused, e.rec, map[string]any{"host": r.Host, "port": r.Port, "reason": r.Reason, "unlisted": r.Unlisted})
}

// handleEvents streams the caller's lifecycle events as server-sent events,
// with a comment every 15 seconds to keep intermediaries from timing out.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "streaming unsupported")
		return
	}
	release, ok := s.acquireStream(w, c.tenant)
	if !ok {
		return
	}
	defer release()
	sub, ok := s.events.subscribe(c.tenant, s.cfg.Limits.MaxSubscribersPerTenant)
	if !ok {
		writeError(w, http.StatusTooManyRequests, api.CodeQuota, fmt.Sprintf("at most %d event streams per tenant", s.cfg.Limits.MaxSubscribersPerTenant))
		return
	}
	defer s.events.unsubscribe(sub)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, ": cordon events\n\n")
	fl.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case ev := <-sub.ch:
			b, _ := json.Marshal(ev)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b); err != nil {
				return
			}
			fl.Flush()
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-sub.gone:
			// Deliver what was queued, then say why the stream ends.
			for {
				select {
				case ev := <-sub.ch:
					b, _ := json.Marshal(ev)
					_, _ = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b)
					continue
				default:
				}
				break
			}
			_, _ = fmt.Fprint(w, ": stream closed (overflow or shutdown)\n\n")
			fl.Flush()
			return
		case <-r.Context().Done():
			return
		}
	}
}
