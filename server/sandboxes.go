package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/cordon-sandbox/cordon/internal/printable"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/seeds"
	"github.com/cordon-sandbox/cordon/server/api"
)

// entry is a sandbox the daemon holds. Its record is guarded by Server.mu.
type entry struct {
	rec *record
	// disk is its persistent workspace's disk quota (0 for none), fixed
	// before the entry is published: the tenant's share of the disks
	// counts it (Limits.MaxDiskStorePerTenant).
	disk  int64
	sb    *sandbox.Sandbox
	agent *agentProxy
	// tearing is the teardown under way, which every destroy shares.
	tearing *teardown
	lastAPI atomic.Int64 // unix nanoseconds of the last request about it
	streams atomic.Int32 // open streams into it
	misses  int          // consecutive failed activity checks (reaper only)
	// portConns holds a slot per connection open to the exposed ports.
	portConns chan struct{}
	// rewatch wakes the entry's watch when the sandbox resumes on a new
	// instance, whose exit is another.
	rewatch chan struct{}
	// usage is the last read of its metrics, which the next one's CPU
	// use is measured from.
	usage atomic.Pointer[sandbox.Usage]
	// history is the daemon's readings of its metrics.
	history history
	// deadlines are the session timeouts the daemon holds for it;
	// deadlinesUnread says it was adopted paused, its agent not yet asked
	// for them.
	deadlines       heldDeadlines
	deadlinesUnread atomic.Bool
}

func (e *entry) touch() { e.lastAPI.Store(time.Now().UnixNano()) }

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	var req api.CreateRequest
	if !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &req) {
		return
	}
	var from *api.Snapshot
	var tmpl *api.Template
	if req.Template != "" {
		t, err := s.templateFor(c.tenant, req.Template)
		if err != nil {
			writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
			return
		}
		tmpl = t
		if isZeroSpec(req.Spec) && req.Pool == "" {
			req.Spec = t.Spec
		}
		if t.Snapshot != "" {
			if req.FromSnapshot != "" {
				writeError(w, http.StatusBadRequest, api.CodeInvalid, "template "+t.Name+" has a snapshot of its own: give fromSnapshot or template, not both")
				return
			}
			req.FromSnapshot = t.Snapshot
		}
	}
	if req.FromSnapshot != "" {
		sn, err := s.snapshotFor(c, req.FromSnapshot)
		if err != nil {
			writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
			return
		}
		from = &sn
		if isZeroSpec(req.Spec) && req.Pool == "" && tmpl == nil {
			req.Spec = sn.Spec
		}
	}
	spec, err := s.toSpec(req.Spec)
	if err == nil {
		err = tenantEgress(c, req.Spec.Egress)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	now := time.Now().UTC()
	rec := &record{Sandbox: api.Sandbox{Tenant: c.tenant, State: api.StateRunning, Labels: req.Labels, CreatedAt: now, LastActivity: now}}
	var msg string
	if rec.ExpiresAt, msg = s.expiry(now, req.TTLSeconds); msg == "" {
		rec.IdleTimeoutNs, msg = s.idleTimeout(req.IdleTimeoutSeconds)
	}
	if msg != "" {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, msg)
		return
	}
	rec.IdleTimeout = int64(rec.IdleTimeoutNs / time.Second)
	if msg := labelsProblem(req.Labels); msg != "" {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, msg)
		return
	}
	// What a persistent workspace's disk may hold counts against the
	// tenant's share of the disks, the default quota included.
	var diskQuota int64
	if spec.PersistentWorkspace {
		if eff, err := s.cfg.Provider.Effective(spec); err == nil {
			diskQuota = eff.Limits.DiskBytes
		}
	}
	// The quotas count creates in flight, so concurrent creates cannot
	// overshoot them.
	s.mu.Lock()
	n, disks := 0, diskQuota
	for _, e := range s.live {
		if e.rec.Tenant == c.tenant {
			n++
			disks += e.disk
		}
	}
	if n >= s.cfg.Limits.MaxSandboxesPerTenant {
		s.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, api.CodeQuota, fmt.Sprintf("a tenant may hold at most %d sandboxes", s.cfg.Limits.MaxSandboxesPerTenant))
		return
	}
	if diskQuota > 0 && disks > s.cfg.Limits.MaxDiskStorePerTenant {
		s.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, api.CodeQuota, fmt.Sprintf("a tenant's persistent workspaces may hold at most %d bytes together on this daemon (cordon serve --max-disk-store), and this one's %d would bring them to %d", s.cfg.Limits.MaxDiskStorePerTenant, diskQuota, disks))
		return
	}
	placeholder := &entry{rec: rec, disk: diskQuota}
	slot := fmt.Sprintf("creating-%p", placeholder)
	rec.State = api.StateCreating
	s.live[slot] = placeholder
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.live, slot)
		s.mu.Unlock()
	}()

	start := time.Now()
	source := "cold"
	var sb *sandbox.Sandbox
	clone, forked := r.Context().Value(diskCloneKey{}).(*sandbox.DiskClone)
	var p *pool
	if !forked {
		if p, err = s.poolFor(req, c.tenant); err != nil {
			writeErr(w, err)
			return
		}
	}
	if p != nil {
		rec.Pool = p.spec.Name
		spec = p.sdkSpec
		if sb = p.claim(); sb != nil {
			source = "pool"
		}
	}
	if forked {
		// A fork on a copy of its source's disk (handleFork).
		if sb, err = s.cfg.Provider.CreateOnDisk(r.Context(), spec, clone); err != nil {
			writeErr(w, err)
			return
		}
	}
	if sb == nil {
		if sb, err = s.cfg.Provider.Create(r.Context(), spec); err != nil {
			writeErr(w, err)
			return
		}
	}
	if source == "pool" && p.tmpl != nil {
		from, tmpl, rec.Labels = nil, nil, withLabel(rec.Labels, "cordon.template", p.tmpl.Name)
	}
	if from != nil {
		if err := s.restore(r.Context(), sb, from.Digest); err != nil {
			_ = sb.Destroy(context.WithoutCancel(r.Context()))
			writeError(w, http.StatusUnprocessableEntity, api.CodeSnapshotFailed, "snapshot "+from.ID+" could not be restored: "+err.Error())
			return
		}
	}
	if tmpl != nil {
		if err := s.applyTemplate(r.Context(), sb, tmpl); err != nil {
			_ = sb.Destroy(context.WithoutCancel(r.Context()))
			var drift *seeds.DriftError
			if errors.As(err, &drift) || errors.Is(err, seeds.ErrInvalid) {
				writeError(w, http.StatusConflict, api.CodeTemplateFailed, "template "+tmpl.Name+": "+err.Error())
				return
			}
			writeError(w, http.StatusUnprocessableEntity, api.CodeTemplateFailed, "template "+tmpl.Name+": "+err.Error())
			return
		}
	}
	if tmpl != nil {
		rec.Labels = withLabel(rec.Labels, "cordon.template", tmpl.Name)
	}
	e, err := s.admit(r.Context(), sb, rec, req.Spec)
	if err != nil {
		writeErr(w, err)
		return
	}
	s.metrics.create.With(source).Observe(time.Since(start).Seconds())
	writeJSON(w, http.StatusCreated, s.describe(e))
}

func withLabel(l map[string]string, k, v string) map[string]string {
	if l == nil {
		l = map[string]string{}
	}
	l[k] = v
	return l
}

// maxExecTimeout is the ceiling a sandbox's commands' timeouts may be given
// at create (Config.MaxExecTimeout, default DefaultMaxExecTimeout).
func (s *Server) maxExecTimeout() time.Duration {
	return cmp.Or(s.cfg.MaxExecTimeout, DefaultMaxExecTimeout)
}

// DefaultMaxExecTimeout is Config.MaxExecTimeout's default.
const DefaultMaxExecTimeout = 24 * time.Hour

// The defaults `cordon serve` gives a sandbox whose create names no pids
// limit (DefaultPids), and neither a writable space nor a memory limit
// (DefaultDisk): a host shared by tenants needs both (the provider's
// sandbox.WithDefaultLimits says why), and an operator may change them.
const (
	DefaultPids = 1024
	DefaultDisk = 1 << 30
)

// maxDurationSeconds bounds a duration a caller gives in seconds: ten
// years, far from where a time.Duration (some 292 years) overflows.
const maxDurationSeconds = 10 * 365 * 24 * 3600

// admit registers a started sandbox under rec: a fresh id in the registry,
// the record on disk, the entry live.
func (s *Server) admit(ctx context.Context, sb *sandbox.Sandbox, rec *record, spec api.Spec) (*entry, error) {
	rec.ID, rec.Spec, rec.State = sb.ID(), spec, api.StateRunning
	// The tier and limits it has, the daemon's defaults included.
	got := sb.Spec()
	rec.Spec.Tier = got.Tier
	rec.Spec.Limits = api.Limits{MemoryBytes: got.Limits.MemoryBytes, Pids: got.Limits.Pids, CPUs: got.Limits.CPUs, DiskBytes: got.Limits.DiskBytes}
	rec.Features, rec.Pausable = sb.Features(), sb.CanPause()
	if a, err := sb.Persist(); err == nil {
		rec.Adoption = a
	}
	e := newEntry(rec, sb)
	e.touch()
	// The caller's first command will want a reservation: it is taken
	// while the record is written to disk.
	sb.Client().Prefetch()
	if err := s.store.addSandbox(rec); err != nil {
		return nil, errors.Join(err, sb.Destroy(context.WithoutCancel(ctx)))
	}
	s.mu.Lock()
	s.live[rec.ID] = e
	s.mu.Unlock()
	s.emit(api.EventCreated, rec, map[string]any{"tier": rec.Spec.Tier, "pool": rec.Pool})
	s.emit(api.EventReady, rec, nil)
	s.watch(e)
	return e, nil
}

// lastLine is the last non-empty line of s, bounded.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// describe is an entry's API view.
func (s *Server) describe(e *entry) api.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := e.rec.Sandbox
	out.Labels = maps.Clone(out.Labels)
	if e.sb != nil && (out.State == api.StateRunning || out.State == api.StatePaused) {
		out.BootID = e.sb.BootID()
	}
	if t := time.Unix(0, e.lastAPI.Load()).UTC(); t.After(out.LastActivity) {
		out.LastActivity = t
	}
	return out
}

// lookup finds the caller's sandbox named in the path. Another tenant's
// sandbox is answered exactly as a missing one.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*entry, bool) {
	id, c := r.PathValue("id"), callerOf(r)
	s.mu.Lock()
	e := s.live[id]
	ok := e != nil && e.sb != nil && e.rec.Tenant == c.tenant
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no sandbox "+id)
		return nil, false
	}
	return e, true
}

// usable is lookup for work: a paused or ending sandbox is refused.
func (s *Server) usable(w http.ResponseWriter, r *http.Request) (*entry, bool) {
	e, ok := s.lookup(w, r)
	if !ok {
		return nil, false
	}
	e.touch() // work on a sandbox is activity; looking at it is not
	return e, s.running(w, e)
}

// running reports whether e is running, answering why not when it is not.
func (s *Server) running(w http.ResponseWriter, e *entry) bool {
	s.mu.Lock()
	state := e.rec.State
	s.mu.Unlock()
	switch state {
	case api.StateRunning:
		return true
	case api.StatePaused:
		writeError(w, http.StatusConflict, api.CodePaused, "the sandbox is paused; resume it first")
	case api.StateSuspended:
		writeError(w, http.StatusConflict, api.CodeSuspended, "the sandbox is suspended; resume it first")
	case api.StateLost:
		s.mu.Lock()
		reason := e.rec.Reason
		s.mu.Unlock()
		writeError(w, http.StatusConflict, api.CodeLost, "the sandbox is lost ("+reason+"); delete it")
	default:
		writeError(w, http.StatusNotFound, api.CodeNotFound, "the sandbox is being destroyed")
	}
	return false
}

// expiry is when a sandbox asking for ttlSeconds from now ends (nil:
// never), or why the request is refused. Zero takes the daemon's default;
// with a maximum, no sandbox lives past it, the default's included.
// Durations are judged in seconds before they are multiplied, so no
// number a caller sends overflows into a short or negative one.
func (s *Server) expiry(now time.Time, ttlSeconds int64) (*time.Time, string) {
	maxTTL := int64(maxDurationSeconds)
	if s.cfg.MaxTTL > 0 {
		maxTTL = int64(s.cfg.MaxTTL / time.Second)
	}
	if ttlSeconds < 0 || ttlSeconds > maxTTL {
		return nil, fmt.Sprintf("ttlSeconds %d: want 0 (the daemon's default) to %d", ttlSeconds, maxTTL)
	}
	ttl := time.Duration(ttlSeconds) * time.Second
	if ttl == 0 {
		ttl = s.cfg.DefaultTTL
	}
	if s.cfg.MaxTTL > 0 && (ttl == 0 || ttl > s.cfg.MaxTTL) {
		ttl = s.cfg.MaxTTL
	}
	if ttl == 0 {
		return nil, ""
	}
	exp := now.Add(ttl)
	return &exp, ""
}

// idleTimeout is the idle timeout a request's idleTimeoutSeconds gives
// (zero: none), or why it is refused.
func (s *Server) idleTimeout(seconds int64) (time.Duration, string) {
	switch {
	case seconds > maxDurationSeconds:
		return 0, fmt.Sprintf("idleTimeoutSeconds %d: want a negative number (never), 0 (the daemon's default) or up to %d", seconds, int64(maxDurationSeconds))
	case seconds < 0:
		return 0, ""
	case seconds == 0:
		return s.cfg.DefaultIdleTimeout, ""
	}
	return time.Duration(seconds) * time.Second, ""
}

// handleUpdate serves PATCH /v1/sandboxes/{id}: a new TTL counted from
// now, a new idle timeout, or both, as a create would take them.
func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	var req api.UpdateRequest
	if !readJSON(w, r, 4<<10, &req) {
		return
	}
	if req.TTLSeconds == nil && req.IdleTimeoutSeconds == nil {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "nothing to change: give ttlSeconds, idleTimeoutSeconds or both")
		return
	}
	var exp *time.Time
	var idle time.Duration
	var msg string
	if req.TTLSeconds != nil {
		exp, msg = s.expiry(time.Now().UTC(), *req.TTLSeconds)
	}
	if req.IdleTimeoutSeconds != nil && msg == "" {
		idle, msg = s.idleTimeout(*req.IdleTimeoutSeconds)
	}
	if msg != "" {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, msg)
		return
	}
	s.mu.Lock()
	if e.rec.State == api.StateDestroying {
		s.mu.Unlock()
		writeError(w, http.StatusConflict, api.CodeConflict, "the sandbox is "+api.StateDestroying)
		return
	}
	if req.TTLSeconds != nil {
		e.rec.ExpiresAt = exp
	}
	if req.IdleTimeoutSeconds != nil {
		e.rec.IdleTimeoutNs, e.rec.IdleTimeout = idle, int64(idle/time.Second)
	}
	rec := *e.rec
	s.mu.Unlock()
	e.touch()
	if err := s.store.putSandbox(&rec); err != nil {
		writeErr(w, err)
		return
	}
	data := map[string]any{"idleTimeoutSeconds": rec.IdleTimeout}
	if rec.ExpiresAt != nil {
		data["expiresAt"] = rec.ExpiresAt
	}
	s.emit(api.EventUpdated, &rec, data)
	writeJSON(w, http.StatusOK, s.describe(e))
}

// handleGet describes a sandbox: a live one, or one the registry still
// remembers as destroyed (with the reason: deleted, ttl, idle, lost,
// deadline…).
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	id, c := r.PathValue("id"), callerOf(r)
	s.mu.Lock()
	e := s.live[id]
	s.mu.Unlock()
	if e != nil && e.sb != nil && e.rec.Tenant == c.tenant {
		writeJSON(w, http.StatusOK, s.describe(e))
		return
	}
	rec, err := s.store.sandbox(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	if e == nil && rec != nil && rec.Tenant == c.tenant && rec.State == api.StateDestroyed {
		writeJSON(w, http.StatusOK, rec.Sandbox)
		return
	}
	writeError(w, http.StatusNotFound, api.CodeNotFound, "no sandbox "+id)
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	c, q := callerOf(r), r.URL.Query()
	state := q.Get("state")
	labels := map[string]string{}
	for _, l := range q["label"] {
		k, v, _ := strings.Cut(l, "=")
		labels[k] = v
	}
	es := s.sandboxes(func(e *entry) bool { return e.rec.Tenant == c.tenant })
	out := api.List{Sandboxes: []api.Sandbox{}}
	for _, e := range es {
		d := s.describe(e)
		if state != "" && d.State != state {
			continue
		}
		match := true
		for k, v := range labels {
			if got, ok := d.Labels[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			out.Sandboxes = append(out.Sandboxes, d)
		}
	}
	slices.SortFunc(out.Sandboxes, func(a, b api.Sandbox) int { return a.CreatedAt.Compare(b.CreatedAt) })
	writeJSON(w, http.StatusOK, out)
}

// handleDelete destroys a sandbox and answers once teardown is confirmed.
// Deleting one already destroyed succeeds again.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	id, c := r.PathValue("id"), callerOf(r)
	s.mu.Lock()
	e := s.live[id]
	s.mu.Unlock()
	if e == nil || e.rec.Tenant != c.tenant {
		rec, err := s.store.sandbox(id)
		if err != nil {
			writeErr(w, err)
			return
		}
		if rec != nil && rec.Tenant == c.tenant && rec.State == api.StateDestroyed {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no sandbox "+id)
		return
	}
	if err := s.destroy(r.Context(), e, "deleted"); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// teardown is one destroy of a sandbox, which concurrent callers share.
type teardown struct {
	done chan struct{}
	err  error
}

// destroy tears a sandbox down once: the first caller fixes the reason and
// does it, and every caller waits for the confirmed teardown (one event,
// one count, whoever asked). A failed teardown leaves the sandbox
// "destroying" with the error recorded; the reaper retries it. The entry
// stays live until the registry says it is destroyed, so a caller that
// comes meanwhile finds it and waits too, rather than finding nothing.
func (s *Server) destroy(ctx context.Context, e *entry, reason string) error {
	s.mu.Lock()
	if e.rec.State == api.StateDestroyed {
		s.mu.Unlock()
		return nil
	}
	if t := e.tearing; t != nil {
		s.mu.Unlock()
		select {
		case <-t.done:
			return t.err
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", sandbox.ErrTeardown, ctx.Err())
		}
	}
	t := &teardown{done: make(chan struct{})}
	e.tearing = t
	first := e.rec.State != api.StateDestroying
	if first {
		e.rec.State, e.rec.Reason = api.StateDestroying, reason
	}
	rec := *e.rec
	s.mu.Unlock()
	// The "destroying" state is written only if teardown fails (below):
	// a daemon that dies meanwhile finds the sandbox recorded live, and
	// adopts it back or records it lost, which is as good.
	if first && reason != "deleted" && reason != "shutdown" {
		s.metrics.reaped.With(reason).Inc()
		s.emit(api.EventReaped, &rec, map[string]any{"reason": reason})
	}
	if first && reason == "deadline" {
		// The agent did not keep a deadline: what the sandbox was doing
		// goes to the log before the teardown takes it away, where the
		// tier can say (sandbox.Dumper).
		e.sb.DumpState(context.WithoutCancel(ctx))
		if d := e.sb.Diagnostics(); d != "" {
			s.log.Warn("the sandbox's state as it is torn down past a deadline", "sandbox", rec.ID, "diagnostics", d)
		}
	}
	start := time.Now()
	err := e.sb.Destroy(context.WithoutCancel(ctx))
	s.mu.Lock()
	if err != nil {
		e.rec.Error = err.Error()
	} else {
		e.rec.State, e.rec.Error, e.rec.LastActivity, e.rec.Adoption = api.StateDestroyed, "", time.Now().UTC(), nil
	}
	rec = *e.rec
	s.mu.Unlock()
	if perr := s.store.putSandbox(&rec); perr != nil {
		s.log.Error("registry write failed", "sandbox", rec.ID, "err", perr)
	}
	s.mu.Lock()
	if err == nil {
		delete(s.live, e.rec.ID)
		s.dropPortsLocked(e.rec.ID)
		e.deadlines.stopAll()
	}
	e.tearing = nil
	s.mu.Unlock()
	t.err = err
	close(t.done)
	if err != nil {
		return err
	}
	s.metrics.destroy.Observe(time.Since(start).Seconds())
	s.emit(api.EventDestroyed, &rec, map[string]any{"reason": rec.Reason})
	return nil
}

// sandboxes returns the live entries with a sandbox that keep, called
// under mu, admits.
func (s *Server) sandboxes(keep func(*entry) bool) []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var es []*entry
	for _, e := range s.live {
		if e.sb != nil && keep(e) {
			es = append(es, e)
		}
	}
	return es
}

// every calls fn each d until the daemon stops (a goroutine of s.bg).
func (s *Server) every(d time.Duration, fn func()) {
	defer s.bg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		fn()
	}
}

// reapOnce enforces TTLs and idle timeouts, and retries failed teardowns.
func (s *Server) reapOnce() {
	now := time.Now()
	s.reapSnapshots(now)
	for _, e := range s.sandboxes(func(*entry) bool { return true }) {
		s.mu.Lock()
		state, exp, idle := e.rec.State, e.rec.ExpiresAt, e.rec.IdleTimeoutNs
		s.mu.Unlock()
		reason := ""
		switch {
		case state == api.StateDestroying:
			reason = "retry"
		case exp != nil && now.After(*exp):
			reason = "ttl"
		case idle > 0 && state != api.StateSuspended:
			// (A suspended sandbox is kept until its TTL, or its rm.)
			reason = s.idleCheck(e, state, idle, now)
		}
		if reason == "" {
			continue
		}
		if e.sb.CanSuspend() && (reason == "idle" || reason == "lost" && e.sb.OnDisk()) {
			// A persistent sandbox is stopped, not destroyed: its files
			// are kept until it starts again.
			s.stopIdle(e, reason)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.destroy(ctx, e, reason); err != nil {
			s.log.Warn("reap failed; will retry", "sandbox", e.rec.ID, "reason", reason, "err", err)
		}
		cancel()
	}
}

// idleCheck returns "idle" when nothing has happened in the sandbox for
// longer than its idle timeout, "lost" when its agent stopped answering
// (or restarted), "" otherwise. Activity inside counts: running commands,
// requests in progress, egress connections, and streams through the
// daemon.
func (s *Server) idleCheck(e *entry, state string, idle time.Duration, now time.Time) string {
	last := time.Unix(0, e.lastAPI.Load())
	if e.streams.Load() > 0 {
		e.touch()
		return ""
	}
	if state == api.StateRunning {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a, err := e.sb.Activity(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, sandbox.ErrAgent) {
				return "lost"
			}
			if e.misses++; e.misses >= 3 {
				return "lost"
			}
			return ""
		}
		e.misses = 0
		if ag := a.Agent; ag != nil {
			if ag.Running > 0 || ag.Requests > 0 {
				last = now
			} else if t := now.Add(-time.Duration(ag.IdleMs) * time.Millisecond); t.After(last) {
				last = t
			}
		}
		if a.EgressOpen > 0 {
			last = now
		} else if a.EgressLast.After(last) {
			last = a.EgressLast
		}
	}
	s.mu.Lock()
	if last.After(e.rec.LastActivity) {
		e.rec.LastActivity = last.UTC()
	}
	s.mu.Unlock()
	if now.Sub(last) > idle {
		return "idle"
	}
	return ""
}

// labelsProblem says what is wrong with a create's labels, if anything.
// They are at most 64; a key is 1-128 bytes of printable characters with
// no space, '=' or ',' (cordon ls shows labels as k=v,k=v, and a list
// selects them as k=v); a value is at most 1024 bytes of printable
// characters. Another tenant's administrator reads them on a terminal.
func labelsProblem(labels map[string]string) string {
	const want = "labels: at most 64; keys of 1-128 bytes of printable characters without spaces, '=' or ','; values of at most 1024 bytes of printable characters"
	if len(labels) > 64 {
		return fmt.Sprintf("%s (%d given)", want, len(labels))
	}
	for k, v := range labels {
		switch {
		case k == "" || len(k) > 128 || !printable.Valid(k) || strings.IndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || r == '=' || r == ',' }) >= 0:
			return fmt.Sprintf("%s: the key %q", want, k)
		case len(v) > 1024 || !printable.Valid(v):
			return fmt.Sprintf("%s: the value of %q", want, k)
		}
	}
	return ""
}
