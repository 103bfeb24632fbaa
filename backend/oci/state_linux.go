package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/pidfd"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// stateDir makes the state directory, traversable by everyone (mode 0711):
// a container's user-namespaced root reaches its bundle's root through it.
// The runtime, asked first (a daemon's sweep at start), would make it 0700.
// Its parents are the operator's: one that is not traversable is said so.
func (b *Backend) stateDir() error {
	if err := os.MkdirAll(b.cfg.StateDir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(b.cfg.StateDir, 0o711); err != nil {
		return err
	}
	if err := host.Traversable(b.cfg.StateDir); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	return nil
}

// orphanAge is how old a sandbox directory without an owner must be to be
// swept: one younger may be a create still under way.
const orphanAge = time.Minute

// sweepOrphans tears down, once per process, the sandboxes of this state
// directory whose creator is gone: killed before it could tear them down
// (their agent stopped when it went, but the runtime's state, the
// cgroups, the layout mounts and the directory remain), or a directory no
// owner explains. A failure is left for the next process to retry.
func (b *Backend) sweepOrphans(ctx context.Context) {
	for _, dir := range host.Orphans(b.cfg.StateDir, orphanAge) {
		inst := &instance{b: b, id: filepath.Base(dir), dir: dir, logs: logbuf.New(1), created: true}
		if st, ok, err := b.state(ctx, inst.id); err == nil && ok && st.Status == "running" && st.Pid > 0 {
			inst.proc, _ = pidfd.Open(st.Pid, "")
		}
		_ = inst.Destroy(ctx)
	}
}
