package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
)

// pool keeps Size ready sandboxes of one spec. A claim takes the oldest in
// O(1) under the pool's lock, so no sandbox is handed out twice; a filler
// goroutine replaces what was claimed. Every pooled sandbox was created on
// its own, with its own agent token and workspace.
type pool struct {
	s       *Server
	spec    api.Pool
	sdkSpec sandbox.Spec
	key     string

	// tmpl is the template whose sandboxes the pool keeps, or nil.
	tmpl *api.Template

	mu      sync.Mutex
	ready   []*sandbox.Sandbox
	closed  bool
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	lastErr string
}

var errNoPool = errors.New("no such pool")

// refillDelay is how long a pool waits after a claim before refilling.
const refillDelay = 100 * time.Millisecond

// specKey is a spec's canonical form, for matching creates to pools.
func (s *Server) specKey(sp api.Spec) string {
	if sp.Tier == "" {
		if b, err := s.cfg.Provider.Backend(""); err == nil {
			sp.Tier = b.Name()
		}
	}
	b, _ := json.Marshal(sp) // map keys are sorted: equal specs, equal keys
	return string(b)
}

func (s *Server) startPool(spec api.Pool) error {
	key := s.specKey(spec.Spec)
	var tmpl *api.Template
	if spec.Template != "" {
		t, err := s.templateFor(spec.Tenant, spec.Template)
		if err != nil {
			return err
		}
		tmpl, spec.Spec, key = t, t.Spec, templatePoolKey(spec.Tenant, spec.Template)
	}
	sdk, err := s.toSpec(spec.Spec)
	if err != nil {
		return err
	}
	p := &pool{s: s, spec: spec, sdkSpec: sdk, key: key, tmpl: tmpl, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	old := s.pools[spec.Name]
	s.pools[spec.Name] = p
	s.mu.Unlock()
	if old != nil {
		old.close(context.Background())
	}
	go p.fill()
	return nil
}

// templatePoolKey is the key of a template's pool: no plain create's
// spec key, so only creates from the template claim from it.
func templatePoolKey(tenant, name string) string { return "template " + tenant + "/" + name }

// poolFor finds the pool a create should claim from, or nil; a create
// from a template claims only from that template's pool.
func (s *Server) poolFor(req api.CreateRequest, tenant string) (*pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Template != "" {
		key := templatePoolKey(tenant, req.Template)
		for _, p := range s.pools {
			if p.key == key && (req.Pool == "" || req.Pool == p.spec.Name) {
				return p, nil
			}
		}
		return nil, nil
	}
	if req.Pool != "" {
		p := s.pools[req.Pool]
		if p == nil || p.tmpl != nil {
			return nil, fmt.Errorf("%w %q", errNoPool, req.Pool)
		}
		if !isZeroSpec(req.Spec) && s.specKey(req.Spec) != p.key {
			return nil, fmt.Errorf("%w: the spec differs from pool %q's; give one or the other", sandbox.ErrInvalidSpec, req.Pool)
		}
		return p, nil
	}
	if len(s.pools) == 0 {
		return nil, nil
	}
	key := s.specKey(req.Spec)
	for _, p := range s.pools {
		if p.key == key && p.tmpl == nil {
			return p, nil
		}
	}
	return nil, nil
}

func isZeroSpec(sp api.Spec) bool {
	b, _ := json.Marshal(sp)
	return string(b) == "{}"
}

// claim hands out one ready sandbox, or nil when the pool is empty.
func (p *pool) claim() *sandbox.Sandbox {
	p.mu.Lock()
	var sb *sandbox.Sandbox
	if len(p.ready) > 0 && !p.closed {
		sb = p.ready[0]
		p.ready[0] = nil
		p.ready = p.ready[1:]
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return sb
}

func (p *pool) sizes() (ready, size int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready), p.spec.Size
}

// fill keeps the pool at its size, one create at a time so that refills
// do not crowd out the sandboxes in use.
func (p *pool) fill() {
	defer close(p.done)
	backoff := 100 * time.Millisecond
	for {
		p.mu.Lock()
		closed, need := p.closed, p.spec.Size-len(p.ready)
		p.mu.Unlock()
		if closed {
			return
		}
		if need <= 0 {
			select {
			case <-p.wake:
				// A claimed sandbox is about to run its first command:
				// starting its replacement at once would compete with it
				// for the CPU.
				select {
				case <-time.After(refillDelay):
				case <-p.stop:
				}
			case <-p.stop:
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sb, err := p.s.cfg.Provider.Create(ctx, p.sdkSpec)
		if err == nil {
			// A warm sandbox has run a command: the agent's spawn path is
			// paged in and its connection open before a caller waits on it.
			if _, err = sb.Exec(ctx, "true", sandbox.ExecOptions{}); err == nil && p.tmpl != nil {
				err = p.s.prepare(ctx, sb, p.tmpl)
			}
			if err != nil {
				err = errors.Join(err, sb.Destroy(context.WithoutCancel(ctx)))
			}
		}
		cancel()
		if err != nil {
			p.mu.Lock()
			p.lastErr = err.Error()
			p.mu.Unlock()
			p.s.log.Warn("pool refill failed", "pool", p.spec.Name, "err", err)
			select {
			case <-time.After(backoff):
			case <-p.wake:
			case <-p.stop:
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = sb.Destroy(context.Background())
			return
		}
		p.ready = append(p.ready, sb)
		p.mu.Unlock()
	}
}

// close stops refilling and destroys the ready sandboxes.
func (p *pool) close(ctx context.Context) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	close(p.stop)
	for _, sb := range ready {
		if err := sb.Destroy(ctx); err != nil {
			p.s.log.Error("pool teardown failed", "pool", p.spec.Name, "err", err)
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
	}
}

func (s *Server) handlePutPool(w http.ResponseWriter, r *http.Request) {
	var in api.Pool
	if !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &in) {
		return
	}
	in.Name, in.Ready = r.PathValue("name"), 0
	if !validName(in.Name, 63, false) {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "a pool name is 1-63 of a-z, 0-9, '.', '_' and '-'")
		return
	}
	if in.Size < 0 || in.Size > s.cfg.Limits.MaxPoolSize {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("a pool's size is 0-%d", s.cfg.Limits.MaxPoolSize))
		return
	}
	if in.Template != "" {
		if !isZeroSpec(in.Spec) {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "a template's pool takes the template's spec: give template or spec, not both")
			return
		}
		if in.Tenant == "" {
			in.Tenant = callerOf(r).tenant
		}
		if _, err := s.templateFor(in.Tenant, in.Template); err != nil {
			writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error()+" of tenant "+in.Tenant)
			return
		}
	} else if _, err := s.toSpec(in.Spec); err != nil {
		writeErr(w, err)
		return
	}
	if err := s.store.putPool(in); err != nil {
		writeErr(w, err)
		return
	}
	if err := s.startPool(in); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (s *Server) handleListPools(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	var out []api.Pool
	for _, p := range s.pools {
		out = append(out, p.spec)
	}
	s.mu.Unlock()
	for i := range out {
		s.mu.Lock()
		p := s.pools[out[i].Name]
		s.mu.Unlock()
		if p != nil {
			out[i].Ready, _ = p.sizes()
		}
	}
	slices.SortFunc(out, func(a, b api.Pool) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	writeJSON(w, http.StatusOK, map[string]any{"pools": append([]api.Pool{}, out...)})
}

func (s *Server) handleDeletePool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.Lock()
	p := s.pools[name]
	delete(s.pools, name)
	s.mu.Unlock()
	if p == nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no pool "+name)
		return
	}
	if err := s.store.deletePool(name); err != nil {
		writeErr(w, err)
		return
	}
	p.close(r.Context())
	w.WriteHeader(http.StatusNoContent)
}
