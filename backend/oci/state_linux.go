package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/pidfd"
	"github.com/cordon-sandbox/cordon/internal/procid"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// stateDir makes the state directory, traversable by everyone (mode 0711):
// a container's user-namespaced root reaches its bundle's root through it.
// The runtime, asked first (a daemon's sweep at start), would make it 0700.
func (b *Backend) stateDir() error {
	if err := os.MkdirAll(b.cfg.StateDir, 0o711); err != nil {
		return err
	}
	return os.Chmod(b.cfg.StateDir, 0o711)
}

// ownerFile, in a sandbox's directory, names the process that made it
// (procid.Self), unless it is detached.
const ownerFile = "owner"

// orphanAge is how old a sandbox directory without an owner must be to be
// swept: one younger may be a create still under way.
const orphanAge = time.Minute

// sweepOrphans tears down, once per process, the sandboxes of this state
// directory whose creator is gone: killed before it could tear them down
// (their agent stopped when it went, but the runtime's state, the
// cgroups, the layout mounts and the directory remain), or a directory no
// owner explains. A failure is left for the next process to retry.
func (b *Backend) sweepOrphans(ctx context.Context) {
	ents, err := os.ReadDir(b.cfg.StateDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "cordon-") {
			continue
		}
		dir := filepath.Join(b.cfg.StateDir, e.Name())
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		switch {
		case err == nil && procid.Named(string(owner)):
			continue
		case err != nil:
			if st, err := os.Stat(dir); err != nil || time.Since(st.ModTime()) < orphanAge {
				continue
			}
		}
		inst := &instance{b: b, id: e.Name(), dir: dir, logs: logbuf.New(1), created: true}
		if st, ok, err := b.state(ctx, inst.id); err == nil && ok && st.Status == "running" && st.Pid > 0 {
			inst.proc, _ = pidfd.Open(st.Pid, "")
		}
		_ = inst.Destroy(ctx)
	}
}

// agentCopy is a copy of the agent binary at path, in a shared directory
// of base named by the binary's identity (its device, inode, size and
// time), made once.
func agentCopy(base, path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("%w: the agent: %v", sandbox.ErrUnavailable, err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %d %d %d %d.%d", path, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec))
	dir, err := host.SharedDir(base, "agent-"+hex.EncodeToString(sum[:8]), func(dir string) error {
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
