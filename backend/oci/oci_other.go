//go:build !linux

package oci

import (
	"context"
	"fmt"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// Backend is unavailable off Linux: OCI runtimes run Linux containers on
// the host they run on.
type Backend struct{ cfg Config }

// New returns the backend, which refuses every sandbox off Linux.
func New(cfg Config) *Backend {
	if cfg.Tier == "" {
		cfg.Tier = Name
	}
	return &Backend{cfg: cfg}
}

func (b *Backend) Name() string                       { return b.cfg.Tier }
func (b *Backend) StateDir() string                   { return b.cfg.StateDir }
func (b *Backend) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }
func (b *Backend) Probe(context.Context) error {
	return fmt.Errorf("%w: the %s tier needs Linux", sandbox.ErrUnavailable, b.cfg.Tier)
}
func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	return nil, b.Probe(ctx)
}
