package microvm

// What a guest is made of: its initramfs (the agent and the modules it
// loads), its root disk, and the saved booted guest VMs start from.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/vminit"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/internal/disk"
)

// initramfs is the guest's initramfs for this agent: built once per agent
// binary and module set, kept in the state directory.
func (b *Backend) initramfs(extra ...initramfsFile) (string, error) {
	h := sha256.New()
	add := func(p string) error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(h, f)
		return err
	}
	files := []initramfsFile{{Name: "dev", Mode: 0o755}, {Name: "proc", Mode: 0o755}, {Name: "sys", Mode: 0o755}, {Name: "newroot", Mode: 0o755},
		{Name: "lib", Mode: 0o755}, {Name: "lib/modules", Mode: 0o755}, {Name: "init", Mode: 0o755, Src: b.cfg.AgentPath}}
	for _, m := range vminit.Modules {
		files = append(files, initramfsFile{Name: "lib/modules/" + m + ".ko", Mode: 0o644, Src: filepath.Join(b.cfg.ImageDir, "modules", m+".ko")})
	}
	if len(extra) > 0 {
		files = append(files, initramfsFile{Name: "extra", Mode: 0o755})
		for _, f := range extra {
			fmt.Fprintf(h, "extra %s %o\n", f.Name, f.Mode)
			f.Name = "extra/" + f.Name
			files = append(files, f)
		}
	}
	// The inputs' identities (path, inode, size, time): while they are
	// the same, so is the initramfs, and the agent is not hashed again at
	// each VM's start.
	var ids strings.Builder
	for _, f := range files {
		if f.Src != "" {
			var st syscall.Stat_t
			if err := syscall.Stat(f.Src, &st); err != nil {
				return "", err
			}
			fmt.Fprintf(&ids, "%s %d %d %d.%d\n", f.Src, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
		}
	}
	b.initMu.Lock()
	defer b.initMu.Unlock()
	if len(extra) == 0 && ids.String() == b.initIDs {
		if _, err := os.Stat(b.initPath); err == nil {
			touch(b.initPath)
			return b.initPath, nil
		}
	}
	for _, f := range files {
		if f.Src != "" {
			if err := add(f.Src); err != nil {
				return "", err
			}
		}
	}
	path := filepath.Join(b.cfg.StateDir, "initramfs-"+hex.EncodeToString(h.Sum(nil)[:8])+".cpio")
	if len(extra) == 0 {
		b.initIDs, b.initPath = ids.String(), path
	}
	if _, err := os.Stat(path); err == nil {
		touch(path)
		return path, nil
	}
	tmp, err := os.CreateTemp(b.cfg.StateDir, ".initramfs-")
	if err != nil {
		return "", err
	}
	err = writeInitramfs(tmp, files)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	pruneIdle(path)
	return path, nil
}

// rootDisk is a read-only ext4 image of the root directory dir (an
// image's, unpacked by the provider's store), with the mount points a
// guest needs added: built once per directory (by its path and its top's
// modification time; an image's directory is named by its digest), kept
// in the state directory.
func (b *Backend) rootDisk(ctx context.Context, dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	key := sha256.Sum256([]byte(fmt.Sprintf("%s %d %d", dir, st.ModTime().UnixNano(), rootDiskVersion)))
	path := filepath.Join(b.cfg.StateDir, "root-"+hex.EncodeToString(key[:8])+".ext4")
	return path, b.buildOnce(ctx, path, func(tmp string) error { return makeRootDisk(ctx, dir, tmp) })
}

// makeRootDisk writes dir as an ext4 image to tmp, with the guest's mount
// points added where dir has none.
func makeRootDisk(ctx context.Context, dir, tmp string) error {
	var size int64
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	size = size + size/4 + 64<<20
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "cordon-root", "-d", dir, "-E", "root_owner=0:0", tmp, strconv.FormatInt(size>>10, 10)+"k").CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	// The guest's mount points, where the root has none.
	var cmds []string
	for _, p := range []string{"/dev", "/proc", "/sys", "/run", "/tmp", "/home", baseline.Home, baseline.Workspace, "/etc"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			cmds = append(cmds, "mkdir "+p)
		}
	}
	if len(cmds) > 0 {
		c := exec.CommandContext(ctx, "debugfs", "-w", "-f", "-", tmp)
		c.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("debugfs: %v: %s", err, out)
		}
	}
	return nil
}

// buildOnce makes path with build (into a temporary file renamed into
// place) unless it exists, one build at a time across processes (cordon
// runs at once).
//
// What it builds is named by its inputs, and kept in the state directory
// (memory, where that is /run): each use marks it used, and a build
// removes the files of its kind no VM started from for cacheIdle, which
// a newer agent, kernel or root has replaced.
func (b *Backend) buildOnce(ctx context.Context, path string, build func(tmp string) error) error {
	if _, err := os.Stat(path); err == nil {
		touch(path)
		return nil
	}
	lock, err := os.OpenFile(filepath.Join(b.cfg.StateDir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := flock(ctx, lock); err != nil {
		return err
	}
	if _, err := os.Stat(path); err == nil {
		touch(path)
		return nil
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	defer os.Remove(tmp)
	if err := build(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	pruneIdle(path)
	return nil
}

// cacheIdle is how long a built file nothing started from is kept once a
// file of its kind is built.
const cacheIdle = 10 * time.Minute

// touch marks a built file used now.
func touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// pruneIdle removes, beside path (just built), the files of its kind
// ("saved-", "root-", "initramfs-") unused for cacheIdle.
func pruneIdle(path string) {
	dir, name := filepath.Split(path)
	kind, _, ok := strings.Cut(name, "-")
	if !ok {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if n == name || !strings.HasPrefix(n, kind+"-") || strings.HasSuffix(n, ".tmp") {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && time.Since(info.ModTime()) > cacheIdle {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
}

// rootDiskVersion changes when what rootDisk builds does.
const rootDiskVersion = 1

// saved is the saved guest VMs of mem bytes under accel start from: a
// guest booted to the point where it waits for its configuration, its
// state saved once (per kernel, root disk, initramfs, size and
// acceleration) and shared by every VM restored from it. What differs
// per sandbox (token, random seed, clock, boot id) comes after, in the
// configuration and from the agent; what is shared is the kernel's and
// the init's memory as it was then (their address-space layout among it).
//
// A saved guest for persistent workspaces' VMs (withDisk) has a stand-in
// disk attached, its size the least a disk has: a VM restored from it with
// its own disk is told that disk's size (SetDiskSize) before the guest,
// configured, mounts it.
func (b *Backend) saved(ctx context.Context, accel string, mem int64, root string, withDisk bool) (string, error) {
	initrd, err := b.initramfs()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, p := range []string{b.cfg.QEMU, filepath.Join(b.cfg.ImageDir, "vmlinuz"), root, initrd} {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		if filepath.Dir(p) == filepath.Clean(b.cfg.StateDir) {
			// Built here and named by its inputs; its time is when it
			// was last used (touch).
			fmt.Fprintf(h, "%s\n", p)
			continue
		}
		fmt.Fprintf(h, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
	}
	fmt.Fprintf(h, "%s %d %d %t\n", accel, mem, savedVersion, withDisk)
	path := filepath.Join(b.cfg.StateDir, "saved-"+hex.EncodeToString(h.Sum(nil)[:8])+".vmstate")
	err = b.buildOnce(ctx, path, func(tmp string) error {
		o := bootOptions{accel: accel, mem: mem, saving: true, root: root}
		if withDisk {
			o.disk = filepath.Join(b.cfg.StateDir, "stand-in-disk.img")
			// A sparse file of zeros. (Under buildOnce's lock already.)
			if err := os.WriteFile(o.disk, nil, 0o600); err != nil {
				return err
			}
			if err := os.Truncate(o.disk, disk.MinBytes); err != nil {
				return err
			}
		}
		vm, err := b.boot(ctx, o)
		if err != nil {
			return err
		}
		defer vm.kill()
		if err := (QEMU{Binary: b.cfg.QEMU}).Save(ctx, filepath.Join(vm.dir, "monitor.sock"), tmp); err != nil {
			return fmt.Errorf("save a booted guest: %w", err)
		}
		select {
		case <-vm.exited:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		return "", err
	}
	return path, nil
}

// savedVersion changes when what a saved guest holds does.
const savedVersion = 8

// flock takes an exclusive lock on f, held to ctx.
func flock(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != syscall.EWOULDBLOCK {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
