package server

// A create's spec as the API gives it, checked and turned into the SDK's,
// and the SDK's refusals as the API answers them.

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/image"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
)

// toSpec checks an API spec and turns it into the SDK's.
func (s *Server) toSpec(in api.Spec) (sandbox.Spec, error) {
	if in.Autostart && !in.PersistentWorkspace {
		return sandbox.Spec{}, fmt.Errorf("%w: autostart: a sandbox starts again only on a persistent workspace (persistentWorkspace)", sandbox.ErrInvalidSpec)
	}
	if in.PersistentWorkspace && in.Limits.DiskBytes > s.cfg.Limits.MaxDiskBytes {
		return sandbox.Spec{}, fmt.Errorf("%w: limits.diskBytes %d: a persistent workspace's disk is at most %d bytes on this daemon (cordon serve --max-disk-size)", sandbox.ErrInvalidSpec, in.Limits.DiskBytes, s.cfg.Limits.MaxDiskBytes)
	}
	if in.MaxTimeoutMs < 0 || in.MaxTimeoutMs > s.maxExecTimeout().Milliseconds() {
		return sandbox.Spec{}, fmt.Errorf("%w: maxTimeoutMs %d: want 0 (the default, 30 minutes) to %d, this daemon's most", sandbox.ErrInvalidSpec, in.MaxTimeoutMs, s.maxExecTimeout().Milliseconds())
	}
	out := sandbox.Spec{
		Tier: in.Tier, Image: in.Image, Env: in.Env, User: in.User,
		Limits:              sandbox.Limits{MemoryBytes: in.Limits.MemoryBytes, Pids: in.Limits.Pids, CPUs: in.Limits.CPUs, DiskBytes: in.Limits.DiskBytes},
		MaxTimeout:          time.Duration(in.MaxTimeoutMs) * time.Millisecond,
		PersistentWorkspace: in.PersistentWorkspace,
		RuntimeClass:        in.RuntimeClass,
	}
	var err error
	if out.RootFS, err = s.hostPath("rootfs", in.RootFS); err != nil {
		return out, err
	}
	for _, d := range []struct {
		name string
		src  string
		dst  *string
	}{
		{"layout.outputs", in.Layout.Outputs, &out.Layout.Outputs},
		{"layout.uploads", in.Layout.Uploads, &out.Layout.Uploads},
		{"layout.scratch", in.Layout.Scratch, &out.Layout.Scratch},
		{"layout.toolResults", in.Layout.ToolResults, &out.Layout.ToolResults},
		{"layout.transcripts", in.Layout.Transcripts, &out.Layout.Transcripts},
		{"layout.skills", in.Layout.Skills, &out.Layout.Skills},
	} {
		if *d.dst, err = s.hostPath(d.name, d.src); err != nil {
			return out, err
		}
	}
	if o := in.Layout.Owner; o != nil {
		out.Layout.Owner = &sandbox.HostOwner{UID: o.UID, GID: o.GID}
	}
	if in.Egress != nil {
		p, err := s.toPolicy(*in.Egress)
		if err != nil {
			return out, err
		}
		out.Egress = &p
	}
	if err := out.Validate(); err != nil {
		return out, err
	}
	return out, nil
}

// errForbiddenPath: a host path outside the daemon's allowed roots.
var errForbiddenPath = errors.New("host path not allowed")

// errForbiddenEgress: a tenant's egress rule that only the operator may
// give.
var errForbiddenEgress = errors.New("egress rule not allowed")

// tenantEgress refuses, for a caller who is not an administrator, an egress
// rule that names a private, loopback, link-local, cloud metadata or other
// special range: those reach the daemon's host (its loopback services, its
// cloud's metadata and credentials) or its network, which only the
// operator may open to a sandbox, with an admin key or an egress profile
// of the daemon's (cordon serve --egress-profile).
func tenantEgress(c *caller, in *api.Egress) error {
	if c.admin || in == nil {
		return nil
	}
	for _, r := range in.Rules {
		if why := egress.NamesSpecial(r); why != "" {
			return fmt.Errorf("%w: egress.rules: %s names a %s range, which reaches this daemon's host or its network: only its operator may open one (an admin key, or an egress profile of the daemon's, cordon serve --egress-profile)", errForbiddenEgress, r.Host, why)
		}
	}
	return nil
}

// hostPath admits a host directory only under one of the configured roots,
// judged on its real path, so a symlink cannot lead out.
func (s *Server) hostPath(what, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %s must be an absolute path", sandbox.ErrInvalidSpec, what)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", sandbox.ErrInvalidSpec, what, err)
	}
	for _, root := range s.cfg.HostPaths {
		if rr, err := filepath.EvalSymlinks(root); err == nil && (real == rr || strings.HasPrefix(real, rr+"/")) {
			return real, nil
		}
	}
	return "", fmt.Errorf("%w: %s %s is not under a host directory this daemon allows (cordon serve --host-path)", errForbiddenPath, what, p)
}

func (s *Server) toPolicy(in api.Egress) (egress.Policy, error) {
	rules := slices.Clone(in.Rules)
	if in.Profile != "" {
		prof, ok := s.cfg.Profiles[in.Profile]
		if !ok {
			return egress.Policy{}, fmt.Errorf("%w: no egress profile %q on this daemon", sandbox.ErrInvalidSpec, in.Profile)
		}
		rules = append(rules, prof.Hosts...)
	}
	mode := egress.Mode(in.Mode)
	switch mode {
	case "":
		mode = egress.DenyAll
		if len(rules) > 0 {
			mode = egress.Static
		}
	case egress.DenyAll, egress.AllowAll:
		if len(rules) > 0 {
			return egress.Policy{}, fmt.Errorf("%w: egress mode %s takes no rules", sandbox.ErrInvalidSpec, mode)
		}
	case egress.Static:
	default:
		return egress.Policy{}, fmt.Errorf("%w: egress mode %q (deny-all, allow-all or static)", sandbox.ErrInvalidSpec, in.Mode)
	}
	for _, r := range rules {
		if _, err := egress.ParseRule(ruleString(r)); err != nil {
			return egress.Policy{}, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
		}
	}
	return egress.Policy{Mode: mode, Rules: rules}, nil
}

func ruleString(r egress.Rule) string {
	if len(r.Ports) == 0 {
		return r.Host
	}
	ps := make([]string, len(r.Ports))
	for i, p := range r.Ports {
		ps[i] = fmt.Sprint(p)
	}
	return r.Host + ":" + strings.Join(ps, ",")
}

// errorStatus maps an SDK error to an HTTP status and API code.
func errorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, errNoPool):
		return http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, errForbiddenPath), errors.Is(err, errForbiddenEgress):
		return http.StatusForbidden, api.CodeForbidden
	case errors.Is(err, sandbox.ErrInvalidSpec), errors.Is(err, sandbox.ErrUnknownTier), errors.Is(err, egress.ErrInvalid), errors.Is(err, image.ErrInvalidReference):
		return http.StatusBadRequest, api.CodeInvalid
	case errors.Is(err, sandbox.ErrUnsupported):
		return http.StatusUnprocessableEntity, api.CodeUnsupported
	case errors.Is(err, sandbox.ErrUnavailable):
		return http.StatusServiceUnavailable, api.CodeUnavailable
	case errors.Is(err, sandbox.ErrTeardown):
		return http.StatusInternalServerError, api.CodeTeardown
	case errors.Is(err, sandbox.ErrAgent):
		return http.StatusBadGateway, api.CodeAgent
	case errors.Is(err, sandbox.ErrDestroyed):
		return http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, sandbox.ErrSuspended):
		return http.StatusConflict, api.CodeSuspended
	case errors.Is(err, image.ErrNoSuchImage):
		return http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, image.ErrUnreachable):
		return http.StatusBadGateway, api.CodeRegistry
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return http.StatusBadGateway, api.CodeAgent
	}
	return http.StatusInternalServerError, api.CodeInternal
}

func writeErr(w http.ResponseWriter, err error) {
	status, code := errorStatus(err)
	writeError(w, status, code, err.Error())
}
