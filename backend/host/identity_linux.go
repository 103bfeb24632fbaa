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
	shared, err := SharedSource(dir, "identity", hex.EncodeToString(h.Sum(nil))[:16], func(tmp string) error {
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

// AgentCopy is a copy of the agent binary at path, in a SharedSource of
// base named by the binary's identity (its device, inode, size and time),
// made once. The copies of other builds of the agent (an upgrade, a
// rebuild) would otherwise pile up, 6 MiB each.
func AgentCopy(base, path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("%w: the agent: %v", sandbox.ErrUnavailable, err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %d %d %d %d.%d", path, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec))
	dir, err := SharedSource(base, "agent", hex.EncodeToString(sum[:8]), func(dir string) error {
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
	return filepath.Join(dir, "cordon-agent"), nil
}

// SharedSource is SharedDir(base, kind+"-"+key, fill) for what sandboxes
// take from the host only as they start: a bind's source (the agent, the
// identity files), which a running sandbox holds by itself, and which
// none starts from again (a persistent sandbox's start takes it anew).
// Each use marks the directory used (its time), and a use removes the
// kind's other directories in base unused for sharedIdle, at most once per
// sharedIdle and base in a process: otherwise one would stay for every
// build of the agent, every image and every user ever run.
//
// A directory a start has just been given but not yet bound could go
// only if it was unused for sharedIdle before: a start that loses that
// race of microseconds fails, and can be retried. Never for a
// container's root or anything mounted over (a skeleton): removing a
// mount point detaches what another mount namespace mounted on it.
func SharedSource(base, kind, key string, fill func(dir string) error) (string, error) {
	dir, err := SharedDir(base, kind+"-"+key, fill)
	if err != nil {
		return "", err
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
	sharedPrunes.Lock()
	gate := base + "\x00" + kind
	due := now.Sub(sharedPrunes.last[gate]) > sharedIdle
	if due {
		sharedPrunes.last[gate] = now
	}
	sharedPrunes.Unlock()
	if due {
		pruneShared(base, kind+"-", filepath.Base(dir), sharedIdle)
	}
	return dir, nil
}

// sharedIdle is how long a SharedSource directory may go unused before a
// use of another of its kind removes it.
const sharedIdle = 10 * time.Minute

// sharedPrunes is when this process last pruned each base's kind.
var sharedPrunes = struct {
	sync.Mutex
	last map[string]time.Time
}{last: map[string]time.Time{}}

// pruneShared removes from base the directories named with prefix, other
// than keep, unused for idle.
func pruneShared(base, prefix, keep string, idle time.Duration) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) || e.Name() == keep {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > idle {
			_ = os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}
