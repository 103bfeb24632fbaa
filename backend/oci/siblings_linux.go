package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// A tier's state directories, one per runtime the operator named
// (StateName), lie side by side. A runtime cannot read another's state,
// so a sandbox is taken back, and a directory swept, by a backend of the
// runtime that made it (its siblings), whichever the configuration names
// now: changing CORDON_OCI_RUNTIME loses no sandbox and orphans none.

// runtimeRecord, in a state directory, names the runtime that keeps its
// containers.
const runtimeRecord = ".runtime"

// recordRuntime notes b's runtime in its state directory, for a sibling.
func (b *Backend) recordRuntime() {
	file := filepath.Join(b.cfg.StateDir, runtimeRecord)
	if got, err := os.ReadFile(file); err == nil && string(got) == b.runtime {
		return
	}
	_ = os.WriteFile(file, []byte(b.runtime), 0o644)
}

// siblings are the backends of this tier's other state directories beside
// b's, where b's is laid out by StateName (a state directory given
// otherwise has none).
func (b *Backend) siblings() []*Backend {
	own, kind := filepath.Base(b.cfg.StateDir), StateName(b.cfg.Tier, "")
	if own != kind && !strings.HasPrefix(own, kind+"-") {
		return nil
	}
	parent := filepath.Dir(b.cfg.StateDir)
	ents, _ := os.ReadDir(parent)
	var out []*Backend
	for _, e := range ents {
		dir := filepath.Join(parent, e.Name())
		if n := e.Name(); e.IsDir() && n != own && (n == kind || strings.HasPrefix(n, kind+"-")) && ours(dir) {
			out = append(out, b.sibling(dir, ""))
		}
	}
	return out
}

// ours reports whether path is this user's and no one else may write it:
// a sibling's directory and its record of a runtime, which is run as this
// user, are trusted no further than that.
func ours(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && int(st.Uid) == os.Geteuid() && st.Mode&0o022 == 0
}

// sibling is the backend of the state directory dir: its runtime the one
// recorded there, else runtime ("": the tier's choice).
func (b *Backend) sibling(dir, runtime string) *Backend {
	b.sibMu.Lock()
	defer b.sibMu.Unlock()
	if s, ok := b.sibs[dir]; ok {
		return s
	}
	if file := filepath.Join(dir, runtimeRecord); ours(file) {
		if rec, err := os.ReadFile(file); err == nil && len(rec) > 0 {
			runtime = string(rec)
		}
	}
	cfg := b.cfg
	cfg.StateDir, cfg.Runtime = dir, runtime
	s := New(cfg)
	if b.sibs == nil {
		b.sibs = map[string]*Backend{}
	}
	b.sibs[dir] = s
	return s
}

// sweepSiblingOrphans is sweepOrphans for the siblings' directories: only
// a directory that holds an orphan costs its runtime's probe.
func (b *Backend) sweepSiblingOrphans(ctx context.Context) {
	for _, s := range b.siblings() {
		if len(host.Orphans(s.cfg.StateDir, orphanAge)) > 0 && s.probeOnce(ctx) == nil {
			s.sweepOrphans(ctx)
		}
	}
}

// sweepSiblings is Sweep for the siblings' directories (a daemon's start:
// they are its own). A sibling whose runtime is gone started nothing this
// host can still reach, and is left.
func (b *Backend) sweepSiblings(ctx context.Context, keep []sandbox.Instance) error {
	var errs []error
	for _, s := range b.siblings() {
		if err := s.sweep(ctx, keep); err != nil && !errors.Is(err, sandbox.ErrUnavailable) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
