// Package server is cordon's daemon (`cordon serve`): the provider behind a
// REST API for many callers, with API keys and tenants, a registry on disk,
// TTL and idle reaping, warm pools, lifecycle events and metrics.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/metrics"
	"github.com/cordon-sandbox/cordon/runs"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
)

// Config configures a Server.
type Config struct {
	// Provider creates the sandboxes.
	Provider *sandbox.Provider
	// StateDir holds the registry (cordon.db).
	StateDir string
	// HostPaths are the host directories under which a caller may name a
	// root filesystem or layout directories; empty refuses every host path
	// (images remain available).
	HostPaths []string
	// Profiles are named egress profiles a create may refer to.
	Profiles map[string]egress.Profile
	// DefaultTTL applies when a create gives none (zero: no TTL); MaxTTL
	// caps any TTL asked for (zero: no cap).
	DefaultTTL, MaxTTL time.Duration
	// DefaultIdleTimeout applies when a create gives none (zero: never).
	DefaultIdleTimeout time.Duration
	// MaxExecTimeout caps the ceiling a create may give its commands'
	// timeouts (maxTimeoutMs; zero: DefaultMaxExecTimeout).
	MaxExecTimeout time.Duration
	// ReapInterval is how often TTLs and idle timeouts are checked.
	ReapInterval time.Duration
	// MetricsInterval is how often the daemon reads each running
	// sandbox's metrics for its history (zero: DefaultMetricsInterval;
	// negative: no history), and MetricsHistory how far back the readings
	// go (zero: DefaultMetricsHistory; at most MaxMetricsReadings of them).
	MetricsInterval, MetricsHistory time.Duration
	// Limits bound what one caller can ask for.
	Limits Limits
	// Registry receives the daemon's metrics and is what GET /metrics
	// serves (the egress proxy's are registered by whoever builds it); nil
	// makes a private registry.
	Registry *metrics.Registry
	Log      *slog.Logger
	// Runs runs POST /v1/runs (a runner on the default tier, without a
	// broker, when nil).
	Runs *runs.Runner
	// RunPool keeps this many sandboxes ready for runs of the default
	// memory (pool "runs"; zero: none).
	RunPool int
	// PortsURL gives each exposed port an origin of its own,
	// scheme://*.DOMAIN[:PORT] (a wildcard name that reaches the daemon):
	// a port's pages then share nothing with another's. Empty: a daemon
	// listening on loopback TCP without TLS uses http://*.localhost:PORT
	// (browsers take every name below localhost for loopback); otherwise
	// ports have only their path on the daemon's origin.
	PortsURL string
}

// Limits bound every input.
type Limits struct {
	MaxBodyBytes            int64 // JSON bodies (default 1 MiB)
	MaxExecBodyBytes        int64 // an exec request, stdin included (default 16 MiB)
	MaxSandboxesPerTenant   int   // live sandboxes (default 100)
	MaxStreamsPerTenant     int   // open exec, file, agent and event streams (default 64)
	MaxSubscribersPerTenant int   // open event streams (default 8)
	MaxPoolSize             int   // one pool's size (default 64)
	MaxSnapshotsPerTenant   int   // snapshots kept (default 100)
	MaxTemplatesPerTenant   int   // templates kept (default 100)
	// MaxSnapshotBytes bounds one snapshot's content, uncompressed
	// (default 16 GiB): what a sandbox, or an import, may make the daemon
	// read and store.
	MaxSnapshotBytes int64
	// MaxSnapshotStorePerTenant bounds what one tenant's snapshots hold
	// on the daemon's disk together, compressed as stored (default 64
	// GiB): the count alone let one tenant keep 100 snapshots of 16 GiB
	// each, enough to fill the disk every tenant and the registry share.
	MaxSnapshotStorePerTenant int64
	// MaxDiskBytes bounds one persistent workspace's disk quota
	// (limits.diskBytes; default 64 GiB). Disks are sparse images: what
	// they promise together may pass what the host holds, and this, with
	// MaxSandboxesPerTenant, bounds how far.
	MaxDiskBytes int64
	// MaxDiskStorePerTenant bounds the disk quotas of one tenant's
	// persistent workspaces together (default 256 GiB): one disk's bound
	// and the count of sandboxes let a tenant promise itself 6.4 TB of
	// the disk every tenant shares.
	MaxDiskStorePerTenant int64
}

func (l *Limits) defaults() {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	defi := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxBodyBytes, 1<<20)
	def(&l.MaxExecBodyBytes, 16<<20)
	defi(&l.MaxSandboxesPerTenant, 100)
	defi(&l.MaxStreamsPerTenant, 64)
	defi(&l.MaxSubscribersPerTenant, 8)
	defi(&l.MaxPoolSize, 64)
	defi(&l.MaxSnapshotsPerTenant, 100)
	defi(&l.MaxTemplatesPerTenant, 100)
	def(&l.MaxSnapshotBytes, 16<<30)
	def(&l.MaxSnapshotStorePerTenant, 64<<30)
	def(&l.MaxDiskBytes, 64<<30)
	def(&l.MaxDiskStorePerTenant, 256<<30)
}

// Server is the daemon. Build one with New, serve Handler on listeners,
// and Shutdown at the end.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   *store
	events  *hub
	metrics *daemonMetrics
	mux     *http.ServeMux
	routes  []route
	// portsURL gives each exposed port its own origin (nil: none); set
	// before the daemon serves.
	portsURL *portsURL
	// urlKey signs file URLs (fileurls.go).
	urlKey []byte

	mu      sync.Mutex
	live    map[string]*entry // sandboxes this daemon holds, by id
	keys    map[string]*keyRecord
	pools   map[string]*pool
	ports   map[string]*exposed // exposed ports by token
	streams map[string]int      // open streams by tenant

	runs   *runs.Server
	snapMu sync.Mutex // snapshot deletes and their artifacts
	// snapReaped is when the reaper last looked for expired snapshots.
	snapReaped atomic.Int64
	closing    atomic.Bool
	stop       chan struct{}
	bg         sync.WaitGroup
	stopOnce   sync.Once
}

// New opens the registry, settles what a previous run left, starts the
// reaper and the pools, and returns the daemon.
func New(cfg Config) (*Server, error) {
	if cfg.Provider == nil {
		return nil, errors.New("server: no provider")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = time.Second
	}
	if cfg.MetricsInterval == 0 {
		cfg.MetricsInterval = DefaultMetricsInterval
	}
	if cfg.MetricsHistory <= 0 {
		cfg.MetricsHistory = DefaultMetricsHistory
	}
	if cfg.Registry == nil {
		cfg.Registry = metrics.NewRegistry()
	}
	cfg.Limits.defaults()
	var ports *portsURL
	if cfg.PortsURL != "" {
		var err error
		if ports, err = parsePortsURL(cfg.PortsURL); err != nil {
			return nil, fmt.Errorf("server: the ports URL %w", err)
		}
	}
	st, err := openStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	urlKey, err := loadURLKey(cfg.StateDir)
	if err != nil {
		st.close()
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: cfg.Log, store: st, events: newHub(),
		live: map[string]*entry{}, keys: map[string]*keyRecord{}, pools: map[string]*pool{}, ports: map[string]*exposed{},
		streams: map[string]int{}, stop: make(chan struct{}), portsURL: ports, urlKey: urlKey,
	}
	if s.metrics, err = newMetrics(cfg.Registry, s); err != nil {
		st.close()
		return nil, err
	}
	keys, err := st.keys()
	if err != nil {
		st.close()
		return nil, err
	}
	for _, k := range keys {
		s.keys[k.Hash] = k
	}
	if err := s.recover(); err != nil {
		st.close()
		return nil, err
	}
	s.runs = s.runsServer()
	s.routes = s.routeTable()
	s.mux = http.NewServeMux()
	for _, r := range s.routes {
		pattern := r.pattern
		if r.method != "" {
			pattern = r.method + " " + pattern
		}
		s.mux.Handle(pattern, s.wrap(r))
	}
	pools, err := st.pools()
	if err != nil {
		st.close()
		return nil, err
	}
	for _, p := range pools {
		s.startPool(p)
	}
	if cfg.RunPool > 0 {
		if err := s.startPool(api.Pool{Name: "runs", Spec: s.runs.Runner.Spec(runs.DefaultMemoryMb), Size: cfg.RunPool}); err != nil {
			st.close()
			return nil, err
		}
	}
	s.bg.Add(1)
	go s.every(cfg.ReapInterval, s.reapOnce)
	if cfg.MetricsInterval > 0 {
		s.bg.Add(1)
		go s.every(cfg.MetricsInterval, s.sampleOnce)
	}
	return s, nil
}

// recover settles the registry at start. Every sandbox recorded live is
// adopted back if its agent still answers with the boot identity recorded
// (a paused one is paused again); one that cannot be is recorded destroyed
// ("lost") and torn down as far as it exists. Then each tier that can
// removes every sandbox of its own that no record explains.
func (s *Server) recover() error {
	recs, err := s.store.sandboxes()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	now := time.Now().UTC()
	var kept []*sandbox.Sandbox
	var restart, running []*entry
	for _, r := range recs {
		if r.State == api.StateDestroyed {
			continue
		}
		sb, err := s.adopt(ctx, r)
		if err != nil {
			s.log.Warn("recorded sandbox not adopted", "sandbox", r.ID, "err", err)
			reason := "lost"
			if r.Adoption == nil {
				reason = "restart"
			}
			r.State, r.Reason, r.LastActivity, r.Error, r.Adoption = api.StateDestroyed, reason, now, err.Error(), nil
			if err := s.store.putSandbox(r); err != nil {
				return err
			}
			s.metrics.reaped.With(reason).Inc()
			continue
		}
		kept = append(kept, sb)
		e := newEntry(r, sb)
		e.touch()
		if r.State != api.StateSuspended && sb.Suspended() {
			// Its host went down under it (or its processes were
			// killed): its persistent workspace is all that is left.
			if r.Spec.Autostart {
				restart = append(restart, e)
			} else if err := s.stopped(e, "the sandbox's processes were gone when the daemon started; its workspace is kept"); err != nil {
				return err
			}
		}
		s.live[r.ID] = e
		s.watch(e)
		if r.State == api.StateRunning && !sb.Suspended() {
			running = append(running, e)
		} else if r.State == api.StatePaused {
			e.deadlinesUnread.Store(true)
		}
	}
	s.holdSessionDeadlines(running)
	// What is swept first (a dead sandbox's mount of its disk among it),
	// so that a restart finds its disk free.
	if err := s.cfg.Provider.Sweep(ctx, kept); err != nil {
		s.log.Error("sweeping unrecorded sandboxes", "err", err)
	}
	for _, e := range restart {
		if err := e.sb.Resume(ctx); err != nil {
			s.log.Warn("persistent sandbox not started again", "sandbox", e.rec.ID, "err", err)
			if err := s.stopped(e, "the sandbox's processes were gone when the daemon started, and it did not start again: "+err.Error()); err != nil {
				return err
			}
			continue
		}
		if err := s.settle(e, api.StateRunning, api.EventResumed, map[string]any{"reason": "autostart"}); err != nil {
			return err
		}
		e.resumed()
	}
	return s.store.pruneDestroyed(now.Add(-24 * time.Hour))
}

// stopped records a persistent sandbox found without its processes as
// suspended, with why.
func (s *Server) stopped(e *entry, why string) error {
	return s.settle(e, api.StateSuspended, api.EventSuspended, map[string]any{"reason": why})
}

// settle records e in state (with its adoption as it now is) and emits
// ev with data.
func (s *Server) settle(e *entry, state, ev string, data map[string]any) error {
	ad, aerr := e.sb.Persist()
	s.mu.Lock()
	e.rec.State = state
	if aerr == nil {
		e.rec.Adoption = ad
	}
	rec := *e.rec
	s.mu.Unlock()
	if err := s.store.putSandbox(&rec); err != nil {
		return err
	}
	s.emit(ev, &rec, data)
	return nil
}

func (s *Server) adopt(ctx context.Context, r *record) (*sandbox.Sandbox, error) {
	if r.Adoption == nil {
		return nil, errors.New("the sandbox's tier cannot outlive the daemon")
	}
	spec, err := s.toSpec(r.Spec)
	if err != nil {
		// The daemon's settings changed (a host path no longer allowed):
		// the sandbox exists, so it is taken back all the same, with its
		// recorded tier and egress policy.
		spec = sandbox.Spec{Tier: r.Spec.Tier}
		if r.Spec.Egress != nil {
			if p, perr := s.toPolicy(*r.Spec.Egress); perr == nil {
				spec.Egress = &p
			}
		}
	}
	sb, err := s.cfg.Provider.Adopt(ctx, *r.Adoption, spec)
	if err != nil {
		return nil, err
	}
	if r.State == api.StatePaused {
		if err := sb.Pause(ctx); err != nil {
			r.State = api.StateRunning
		}
	}
	return sb, nil
}

// Handler is the API. A path no route serves, or a method the route does
// not take, is refused in the API's JSON shape, as every refusal is.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A port's host below the ports URL's domain is its origin,
		// wholly: no route of the API is served there.
		if s.portsURL != nil {
			if token, port := s.portsURL.token(r.Host); port {
				if token == "" {
					writeError(w, http.StatusNotFound, api.CodeNotFound, "no such port")
					return
				}
				s.servePortHost(w, r, token)
				return
			}
		}
		h, pattern := s.mux.Handler(r)
		if pattern != "" {
			s.mux.ServeHTTP(w, r)
			return
		}
		// The mux's own refusal says which, and which methods are allowed.
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		switch rec.status {
		case http.StatusMethodNotAllowed:
			writeError(w, rec.status, api.CodeMethod, fmt.Sprintf("%s is not a method %s takes (it takes %s)", r.Method, r.URL.Path, rec.header.Get("Allow")))
		case http.StatusNotFound, 0:
			writeError(w, http.StatusNotFound, api.CodeNotFound, "no route "+r.URL.Path+" (the API is under /v1; see /v1/openapi.yaml)")
		default:
			writeError(w, rec.status, api.CodeInvalid, http.StatusText(rec.status))
		}
	})
}

// statusRecorder keeps what a handler answers, to answer it otherwise.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// HasKeys reports whether any API key exists (a TCP listener needs one).
func (s *Server) HasKeys() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys) > 0
}

// poolList is the warm pools as they are now.
func (s *Server) poolList() []*pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	pools := make([]*pool, 0, len(s.pools))
	for _, p := range s.pools {
		pools = append(pools, p)
	}
	return pools
}

// Shutdown stops the reaper and the pools, ends event streams, and closes
// the registry. Sandboxes are left to the tier: the process tier's end with
// the daemon's process. Call it after the HTTP servers have shut down.
func (s *Server) Shutdown(ctx context.Context) error {
	s.settleRuns(ctx)
	s.closing.Store(true)
	s.stopOnce.Do(func() { close(s.stop) })
	s.events.close()
	for _, p := range s.poolList() {
		p.close(ctx)
	}
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return s.store.close()
}

// Close destroys every sandbox the daemon holds, then shuts down: for
// tests and for `cordon serve` on a signal.
func (s *Server) Close(ctx context.Context) error {
	s.settleRuns(ctx)
	s.closing.Store(true)
	s.stopOnce.Do(func() { close(s.stop) })
	s.mu.Lock()
	var all []*entry
	for _, e := range s.live {
		all = append(all, e)
	}
	s.mu.Unlock()
	var errs []error
	for _, e := range all {
		if err := s.destroy(ctx, e, "shutdown"); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.Shutdown(ctx))
	return errors.Join(errs...)
}

// caller is who made a request.
type caller struct {
	tenant string
	admin  bool
}

type ctxKey int

const (
	callerKey ctxKey = iota
	localKey
)

// LocalConnContext marks connections accepted on the unix socket: there the
// socket's file mode is the boundary, and a request without a key acts as
// the local administrator (tenant "local"), as with docker.sock.
func LocalConnContext(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.LocalAddr().(*net.UnixAddr); ok {
		return context.WithValue(ctx, localKey, true)
	}
	return ctx
}

// LocalTenant is the tenant of unauthenticated requests on the unix socket.
const LocalTenant = "local"

// validName: 1 to max letters (lower case unless upper), digits, '.', '_'
// and '-', starting with a letter or digit. (Hand-written rather than a
// regexp: a compiled {0,63} costs every cordon command half a millisecond
// at start, daemon or not.)
func validName(name string, max int, upper bool) bool {
	if name == "" || len(name) > max {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', upper && 'A' <= c && c <= 'Z':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// bearerSecret is what follows "Bearer" (in any case) and one or more
// spaces in an Authorization header.
func bearerSecret(h string) (string, bool) {
	const scheme = "Bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	secret := strings.TrimLeft(h[len(scheme):], " ")
	return secret, secret != ""
}

func hashKey(secret string) string {
	d := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(d[:])
}

func (s *Server) authenticate(r *http.Request) (*caller, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if local, _ := r.Context().Value(localKey).(bool); local {
			return &caller{tenant: LocalTenant, admin: true}, true
		}
		return nil, false
	}
	secret, ok := bearerSecret(h)
	if !ok {
		return nil, false
	}
	// Keys are 256 random bits: a plain hash is as good as a slow one, and
	// the lookup is by hash, so no secret is ever compared byte by byte.
	s.mu.Lock()
	k := s.keys[hashKey(strings.TrimSpace(secret))]
	s.mu.Unlock()
	if k == nil {
		return nil, false
	}
	return &caller{tenant: k.Tenant, admin: k.Admin}, true
}

func callerOf(r *http.Request) *caller { return r.Context().Value(callerKey).(*caller) }

// route is one API route; the OpenAPI document lists exactly these.
type route struct {
	method, pattern string
	admin           bool // admin keys only
	open            bool // no key needed (healthz, metrics, the document)
	agent           bool // the agent wire passthrough
	h               http.HandlerFunc
}

func (s *Server) routeTable() []route {
	return append(s.baseRoutes(), s.sessionRoutes()...)
}

func (s *Server) baseRoutes() []route {
	return []route{
		{method: "GET", pattern: "/healthz", open: true, h: s.handleHealthz},
		{method: "GET", pattern: "/metrics", open: true, h: s.cfg.Registry.ServeHTTP},
		{method: "GET", pattern: "/v1/openapi.yaml", open: true, h: serveOpenAPI},
		{method: "POST", pattern: "/v1/sandboxes", h: s.handleCreate},
		{method: "GET", pattern: "/v1/sandboxes", h: s.handleList},
		{method: "GET", pattern: "/v1/sandboxes/{id}", h: s.handleGet},
		{method: "DELETE", pattern: "/v1/sandboxes/{id}", h: s.handleDelete},
		{method: "PATCH", pattern: "/v1/sandboxes/{id}", h: s.handleUpdate},
		{method: "GET", pattern: "/v1/sandboxes/{id}/metrics", h: s.handleMetrics},
		{method: "GET", pattern: "/v1/sandboxes/{id}/metrics/history", h: s.handleMetricsHistory},
		{method: "POST", pattern: "/v1/sandboxes/{id}/file-urls", h: s.handleFileURL},
		{method: "GET", pattern: "/v1/file-urls/{token}", open: true, h: s.handleFileURLUse},
		{method: "HEAD", pattern: "/v1/file-urls/{token}", open: true, h: s.handleFileURLUse},
		{method: "PUT", pattern: "/v1/file-urls/{token}", open: true, h: s.handleFileURLUse},
		{method: "POST", pattern: "/v1/file-urls/{token}", open: true, h: s.handleFileURLUse},
		{method: "OPTIONS", pattern: "/v1/file-urls/{token}", open: true, h: s.handleFileURLUse},
		{method: "POST", pattern: "/v1/sandboxes/{id}/exec", h: s.handleExec},
		{method: "POST", pattern: "/v1/sandboxes/{id}/executions/{eid}/cancel", h: s.handleCancel},
		{method: "GET", pattern: "/v1/sandboxes/{id}/files", h: s.handleFiles},
		{method: "HEAD", pattern: "/v1/sandboxes/{id}/files", h: s.handleFiles},
		{method: "PUT", pattern: "/v1/sandboxes/{id}/files", h: s.handleFiles},
		{method: "POST", pattern: "/v1/sandboxes/{id}/files", h: s.handleUpload},
		{method: "DELETE", pattern: "/v1/sandboxes/{id}/files", h: s.handleFiles},
		{method: "GET", pattern: "/v1/sandboxes/{id}/stat", h: s.handleFiles},
		{method: "GET", pattern: "/v1/sandboxes/{id}/dir", h: s.handleFiles},
		{method: "POST", pattern: "/v1/sandboxes/{id}/dir", h: s.handleFiles},
		{method: "POST", pattern: "/v1/sandboxes/{id}/rename", h: s.handleFiles},
		{method: "PUT", pattern: "/v1/sandboxes/{id}/network-policy", h: s.handlePolicy},
		{method: "POST", pattern: "/v1/sandboxes/{id}/pause", h: s.handlePause},
		{method: "POST", pattern: "/v1/sandboxes/{id}/resume", h: s.handlePause},
		{method: "POST", pattern: "/v1/sandboxes/{id}/suspend", h: s.handleSuspend},
		{method: "POST", pattern: "/v1/sandboxes/{id}/seed", h: s.handleSeed},
		{method: "POST", pattern: "/v1/sandboxes/{id}/snapshot", h: s.handleSnapshot},
		{method: "POST", pattern: "/v1/sandboxes/{id}/fork", h: s.handleFork},
		{method: "GET", pattern: "/v1/snapshots", h: s.handleListSnapshots},
		{method: "POST", pattern: "/v1/snapshots/import", h: s.handleImportSnapshot},
		{method: "GET", pattern: "/v1/snapshots/{sid}", h: s.handleGetSnapshot},
		{method: "DELETE", pattern: "/v1/snapshots/{sid}", h: s.handleDeleteSnapshot},
		{method: "GET", pattern: "/v1/snapshots/{sid}/export", h: s.handleExportSnapshot},
		{method: "GET", pattern: "/v1/templates", h: s.handleListTemplates},
		{method: "PUT", pattern: "/v1/templates/{name}", h: s.handlePutTemplate},
		{method: "GET", pattern: "/v1/templates/{name}", h: s.handleGetTemplate},
		{method: "DELETE", pattern: "/v1/templates/{name}", h: s.handleDeleteTemplate},
		{method: "", pattern: "/v1/sandboxes/{id}/agent/{path...}", agent: true, h: s.handleAgent},
		{method: "GET", pattern: "/v1/sandboxes/{id}/sessions/{sid}/terminal", h: s.handleTerminalSocket},
		{method: "GET", pattern: "/v1/sandboxes/{id}/tcp/{port}", h: s.handleTCPSocket},
		{method: "POST", pattern: "/v1/sandboxes/{id}/ports", h: s.handleExposePort},
		{method: "GET", pattern: "/v1/sandboxes/{id}/ports", h: s.handleListPorts},
		{method: "DELETE", pattern: "/v1/sandboxes/{id}/ports/{port}", h: s.handleRevokePort},
		{method: "", pattern: "/v1/ports/{token}/{path...}", open: true, h: s.handlePortProxy},
		{method: "GET", pattern: "/v1/events", h: s.handleEvents},
		{method: "POST", pattern: "/v1/runs", h: s.handleRuns},
		{method: "POST", pattern: "/v1/keys", admin: true, h: s.handleCreateKey},
		{method: "GET", pattern: "/v1/keys", admin: true, h: s.handleListKeys},
		{method: "DELETE", pattern: "/v1/keys/{kid}", admin: true, h: s.handleDeleteKey},
		{method: "GET", pattern: "/v1/pools", admin: true, h: s.handleListPools},
		{method: "PUT", pattern: "/v1/pools/{name}", admin: true, h: s.handlePutPool},
		{method: "DELETE", pattern: "/v1/pools/{name}", admin: true, h: s.handleDeletePool},
	}
}

// wrap authenticates, authorizes and guards a route.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if rt.open {
			rt.h(w, r)
			return
		}
		c, ok := s.authenticate(r)
		if !ok && rt.agent {
			s.agentUnauthenticated(w, r)
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cordon"`)
			writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, "a valid API key is required (Authorization: Bearer KEY)")
			return
		}
		if rt.admin && !c.admin {
			writeError(w, http.StatusForbidden, api.CodeForbidden, "this route needs an admin key")
			return
		}
		if s.closing.Load() {
			writeError(w, http.StatusServiceUnavailable, api.CodeShuttingDown, "the daemon is shutting down")
			return
		}
		rt.h(w, r.WithContext(context.WithValue(r.Context(), callerKey, c)))
	})
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "tiers": s.cfg.Provider.Tiers()})
}

// acquireStream takes one of the tenant's stream slots.
func (s *Server) acquireStream(w http.ResponseWriter, tenant string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[tenant] >= s.cfg.Limits.MaxStreamsPerTenant {
		writeError(w, http.StatusTooManyRequests, api.CodeQuota, fmt.Sprintf("at most %d streams may be open per tenant", s.cfg.Limits.MaxStreamsPerTenant))
		return nil, false
	}
	s.streams[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.streams[tenant]--
			s.mu.Unlock()
		})
	}, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal","message":"cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.Error{Code: code, Message: msg})
}

// readJSON decodes a bounded JSON body that holds exactly one object and
// no unknown fields.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, dst any) bool {
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("the body may be at most %d bytes", limit))
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("the body may be at most %d bytes", limit))
		} else {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "the body is not the expected JSON: "+err.Error())
		}
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "the body holds more than one JSON value")
		return false
	}
	return true
}
