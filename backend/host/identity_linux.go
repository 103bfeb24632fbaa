package host

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// The identity files every sandbox binds in, and the shared directories
// (made once per content, never written again) that hold what tiers which
// bind host files need.

// IdentityBinds renders the baseline's identity files
// (baseline.IdentityFiles) as read-only File binds given by their Content,
// which the process tier's init writes on its own tmpfs.
func IdentityBinds(uid int, hostRoot bool) []sandboxinit.Bind {
	files := baseline.IdentityFiles(uid, hostRoot)
	var binds []sandboxinit.Bind
	for _, p := range slices.Sorted(maps.Keys(files)) {
		binds = append(binds, sandboxinit.Bind{Target: p, ReadOnly: true, File: true, Content: files[p]})
	}
	return binds
}

// SharedDir returns base/name, a directory made once by fill and never
// written again, for content that name identifies (a hash of it). fill
// works on a temporary directory (mode 0755) that is then renamed into
// place whole; when another maker wins the race, its copy, the same, is
// kept.
func SharedDir(base, name string, fill func(dir string) error) (string, error) {
	dir := filepath.Join(base, name)
	if _, err := os.Lstat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(base, sharedTempPrefix+name+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := fill(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return "", err
	}
	return dir, nil
}

// A SharedDir is made under sharedTempPrefix+NAME+"-…" and renamed whole;
// one older than sharedTempAge is abandoned (a maker fills one in
// milliseconds).
const (
	sharedTempPrefix = ".shared-"
	sharedTempAge    = time.Minute
)

// SweepSharedTemps removes from base the temporaries of SharedDir makers
// that were killed before renaming them, leaving any a live maker may still
// be filling.
func SweepSharedTemps(base string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, sharedTempPrefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > sharedTempAge {
			_ = os.RemoveAll(filepath.Join(base, name))
		}
	}
}

// IdentityFiles writes IdentityBinds for a runtime that binds host files,
// and returns them with their Source set. The files are the same for every
// sandbox of a user and root kind, and bound read-only, so they are
// written once, into a SharedDir under dir named by their content.
func IdentityFiles(dir string, uid int, hostRoot bool) ([]sandboxinit.Bind, error) {
	binds := IdentityBinds(uid, hostRoot)
	h := sha256.New()
	for _, b := range binds {
		fmt.Fprintf(h, "%s\x00%s\x00", b.Target, b.Content)
	}
	shared, err := SharedDir(dir, "identity-"+hex.EncodeToString(h.Sum(nil))[:16], func(tmp string) error {
		for _, b := range binds {
			if err := os.WriteFile(filepath.Join(tmp, filepath.Base(b.Target)), []byte(b.Content), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, b := range binds {
		binds[i].Source, binds[i].Content = filepath.Join(shared, filepath.Base(b.Target)), ""
	}
	return binds, nil
}

// AgentCopy is a copy of the agent binary at path, in a shared directory
// of base named by the binary's identity (its device, inode, size and
// time), made once. Each call marks the copy used (its directory's time);
// the first of a process removes the copies of other builds unused for
// agentIdle, which would otherwise pile up, one per build of the agent
// (an upgrade, a rebuild). A copy is needed only between this call and
// its container's start: a container holds what is bound into it, and
// none is started again from its bundle.
func AgentCopy(base, path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("%w: the agent: %v", sandbox.ErrUnavailable, err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %d %d %d %d.%d", path, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec))
	dir, err := SharedDir(base, "agent-"+hex.EncodeToString(sum[:8]), func(dir string) error {
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		dst, err := os.OpenFile(filepath.Join(dir, "cordon-agent"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
		if err != nil {
			return err
		}
		if _, err := io.Copy(dst, src); err != nil {
			dst.Close()
			return err
		}
		return dst.Close()
	})
	if err != nil {
		return "", fmt.Errorf("%w: a copy of the agent: %v", sandbox.ErrUnavailable, err)
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
	once, _ := agentPrunes.LoadOrStore(base, new(sync.Once))
	once.(*sync.Once).Do(func() { pruneAgentCopies(base, filepath.Base(dir), agentIdle) })
	return filepath.Join(dir, "cordon-agent"), nil
}

// agentIdle is how long a copy of another build of the agent may go unused
// before AgentCopy removes it.
const agentIdle = 10 * time.Minute

// agentPrunes holds, per base, the once of its removal of unused copies.
var agentPrunes sync.Map

// pruneAgentCopies removes from base the agent copies other than keep
// unused for idle.
func pruneAgentCopies(base, keep string, idle time.Duration) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "agent-") || e.Name() == keep {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > idle {
			_ = os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}
