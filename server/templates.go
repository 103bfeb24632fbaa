package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/seeds"
	"github.com/cordon-sandbox/cordon/server/api"
)

// handlePutTemplate is PUT /v1/templates/{name}: the template is checked
// as a create would be (its spec, its seed), and its snapshot's state is
// kept as a snapshot of the template's own, so that the one it came from
// may go.
func (s *Server) handlePutTemplate(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	name := r.PathValue("name")
	if !validName(name, 63, false) {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "a template's name is 1 to 63 of a-z 0-9 . _ -, starting with a letter or digit")
		return
	}
	var t api.Template
	if !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &t) {
		return
	}
	t.Name, t.Tenant, t.Snapshot, t.CreatedAt = name, c.tenant, "", time.Now().UTC()
	_, err := s.toSpec(t.Spec)
	if err == nil {
		err = tenantEgress(c, t.Spec.Egress)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	if t.Seed != nil {
		if err := t.Seed.Seed.Validate(t.Seed.Root); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "seed: "+err.Error())
			return
		}
	}
	if len(t.Start) > 64<<10 {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "start: at most 64 KiB")
		return
	}
	old, _ := s.templateFor(c.tenant, name)
	if old == nil {
		all, err := s.store.templates()
		if err != nil {
			writeErr(w, err)
			return
		}
		n := 0
		for _, o := range all {
			if o.Tenant == c.tenant {
				n++
			}
		}
		if n >= s.cfg.Limits.MaxTemplatesPerTenant {
			writeError(w, http.StatusTooManyRequests, api.CodeQuota, fmt.Sprintf("a tenant may keep at most %d templates", s.cfg.Limits.MaxTemplatesPerTenant))
			return
		}
	}
	if t.FromSnapshot != "" {
		from, err := s.snapshotFor(c, t.FromSnapshot)
		if err != nil {
			writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
			return
		}
		own := from
		own.ID, own.Source, own.ExpiresAt, own.CreatedAt = newSnapshotID(), "template "+name, nil, t.CreatedAt
		if err := s.addSnapshot(own, ""); err != nil {
			snapshotError(w, "the template's snapshot", err)
			return
		}
		t.Snapshot = own.ID
		if isZeroSpec(t.Spec) {
			t.Spec = from.Spec
		}
	}
	if err := s.store.putTemplate(t); err != nil {
		writeErr(w, err)
		return
	}
	s.restartTemplatePools(c.tenant, name)
	if old != nil && old.Snapshot != "" {
		s.dropTemplateSnapshot(c.tenant, old.Snapshot)
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) dropTemplateSnapshot(tenant, id string) {
	if sn, err := s.snapshotFor(&caller{tenant: tenant}, id); err == nil {
		if err := s.dropSnapshot(sn); err != nil {
			s.log.Warn("a template's snapshot could not be removed", "snapshot", id, "err", err)
		}
	}
}

var errNoTemplate = errors.New("no such template")

func (s *Server) templateFor(tenant, name string) (*api.Template, error) {
	var t api.Template
	found, err := s.store.get(bucketTemplates, templateKey(tenant, name), &t)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w %q", errNoTemplate, name)
	}
	return &t, nil
}

func (s *Server) handleListTemplates(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	all, err := s.store.templates()
	if err != nil {
		writeErr(w, err)
		return
	}
	out := api.TemplateList{Templates: []api.Template{}}
	for _, t := range all {
		if t.Tenant == c.tenant {
			out.Templates = append(out.Templates, t)
		}
	}
	slices.SortFunc(out.Templates, func(a, b api.Template) int { return compareStrings(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *Server) handleGetTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.templateFor(callerOf(r).tenant, r.PathValue("name"))
	if err != nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) handleDeleteTemplate(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	t, err := s.templateFor(c.tenant, r.PathValue("name"))
	if err != nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
		return
	}
	if err := s.store.deleteTemplate(c.tenant, t.Name); err != nil {
		writeErr(w, err)
		return
	}
	s.restartTemplatePools(c.tenant, t.Name)
	if t.Snapshot != "" {
		s.dropTemplateSnapshot(c.tenant, t.Snapshot)
	}
	w.WriteHeader(http.StatusNoContent)
}

// prepare makes sb what template t makes a new sandbox: its snapshot
// restored, its seed present, its start program running (a template
// pool's refill).
func (s *Server) prepare(ctx context.Context, sb *sandbox.Sandbox, t *api.Template) error {
	if t.Snapshot != "" {
		sn, err := s.snapshotFor(&caller{tenant: t.Tenant}, t.Snapshot)
		if err != nil {
			return err
		}
		if err := s.restore(ctx, sb, sn.Digest); err != nil {
			return err
		}
	}
	return s.applyTemplate(ctx, sb, t)
}

// restartTemplatePools starts again the pools of a template that changed
// (their ready sandboxes were made from what it was), and stops refilling
// those of one deleted.
func (s *Server) restartTemplatePools(tenant, name string) {
	for _, p := range s.poolList() {
		if p.spec.Template == name && p.spec.Tenant == tenant {
			if err := s.startPool(p.spec); err != nil {
				s.log.Warn("a template's pool stopped", "pool", p.spec.Name, "err", err)
				s.mu.Lock()
				if s.pools[p.spec.Name] == p {
					delete(s.pools, p.spec.Name)
				}
				s.mu.Unlock()
				p.close(context.Background())
			}
		}
	}
}

// applyTemplate brings a new sandbox to what its template says, after its
// snapshot (if any) was restored: the seed's repositories, then the start
// program as a session.
func (s *Server) applyTemplate(ctx context.Context, sb *sandbox.Sandbox, t *api.Template) error {
	if t.Seed != nil {
		if _, err := seeds.Ensure(ctx, seedShell(sb), t.Seed.Seed, t.Seed.Root); err != nil {
			return fmt.Errorf("its seed: %w", err)
		}
	}
	if t.Start != "" {
		if _, err := sb.Client().StartSession(ctx, wire.SessionRequest{ID: "start", Command: "/bin/sh", Args: []string{"-c", t.Start}}); err != nil {
			return fmt.Errorf("its start program: %w", err)
		}
	}
	return nil
}
