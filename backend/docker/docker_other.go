//go:build !linux

package docker

import (
	"context"
	"fmt"
	"io"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// Backend is unavailable off Linux: its sandboxes' sockets are directories
// of the engine's host, bound in.
type Backend struct{ cfg Config }

// New returns the backend, which refuses every sandbox off Linux.
func New(cfg Config) *Backend { return &Backend{cfg: cfg} }

func (b *Backend) Name() string                       { return Name }
func (b *Backend) StateDir() string                   { return b.cfg.StateDir }
func (b *Backend) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }
func (b *Backend) Probe(context.Context) error {
	return fmt.Errorf("%w: the %s tier needs Linux", sandbox.ErrUnavailable, Name)
}
func (b *Backend) Load(ctx context.Context, _ io.Reader) ([]string, error) {
	return nil, b.Probe(ctx)
}
func (b *Backend) Close() error { return nil }
func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	return nil, b.Probe(ctx)
}
