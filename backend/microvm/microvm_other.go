//go:build !linux

package microvm

import (
	"context"
	"fmt"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// Name is the tier's name.
const Name = "microvm"

// Config configures the tier (Linux only).
type Config struct {
	StateDir string
	Detached bool
}

// Backend is the microvm tier, which needs Linux.
type Backend struct{}

func New(cfg Config) *Backend                         { return &Backend{} }
func (b *Backend) Name() string                       { return Name }
func (b *Backend) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{Isolated: true} }
func (b *Backend) Probe(ctx context.Context) error {
	return fmt.Errorf("%w: the microvm tier needs Linux", sandbox.ErrUnavailable)
}
func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	return nil, b.Probe(ctx)
}
