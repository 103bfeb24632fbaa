package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// recordAlive reports whether the init a record names still runs.
func recordAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, initRecord))
	if err != nil {
		// No record yet: a sandbox still starting, unless it is old.
		st, err := os.Stat(dir)
		return err == nil && time.Since(st.ModTime()) < time.Minute
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, _ := strconv.Atoi(f[0])
	return procid.Alive(pid, f[1])
}

func (b *Backend) sweepStale() {
	host.SweepSharedTemps(b.cfg.StateDir)
	ents, err := os.ReadDir(b.cfg.StateDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(b.cfg.StateDir, e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "sb-") || recordAlive(dir) {
			continue
		}
		_ = b.removeSandbox(context.Background(), e.Name())
	}
}
