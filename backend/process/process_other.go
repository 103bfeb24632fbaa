//go:build !linux

package process

import (
	"context"
	"fmt"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// Backend is unavailable off Linux: it is built from Linux namespaces.
type Backend struct{}

// New returns the backend, which refuses every sandbox off Linux.
func New(Config) *Backend { return &Backend{} }

func (b *Backend) Name() string                       { return Name }
func (b *Backend) StateDir() string                   { return "" }
func (b *Backend) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }
func (b *Backend) Probe(context.Context) error {
	return fmt.Errorf("%w: the process tier needs Linux", sandbox.ErrUnavailable)
}
func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	return nil, b.Probe(ctx)
}

// SlowCgroupMoves is "" off Linux (there are no cgroups).
func SlowCgroupMoves() string { return "" }
