package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/procid"
)

// A sandbox whose creator was killed dies with it (parent-death signal),
// but its host directory and cgroups stay behind. Each sandbox records its
// init's pid and start time; the first Start of a backend removes the
// leftovers of every recorded sandbox whose init is gone.

const initRecord = "init"

func writeInitRecord(dir string, pid int) error {
	return os.WriteFile(filepath.Join(dir, initRecord), []byte(fmt.Sprintf("%d %s\n", pid, procid.StartTime(pid))), 0o600)
}

func (b *Backend) sweepStale() {
	host.SweepSharedTemps(b.cfg.StateDir)
	for _, id := range host.Stale(b.cfg.StateDir, "sb-", initRecord) {
		_ = b.removeSandbox(context.Background(), id)
	}
	host.SweepCgroups(b.cfg.StateDir, b.cgroups.parents(), "sb-", time.Minute)
}
