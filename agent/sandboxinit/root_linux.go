package sandboxinit

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// The sandbox root's mount plan: what buildRoot mounts on the stage,
// and how the stage becomes the root.

// SystemDirs are the top-level directories of the host's root that a
// sandbox sees (read-only). Everything else at the top (home directories,
// /root, /mnt, /srv, /run, unknown directories) is left out.
var SystemDirs = map[string]bool{
	"bin": true, "sbin": true, "lib": true, "lib32": true, "lib64": true, "libx32": true,
	"usr": true, "etc": true, "opt": true, "var": true,
}

// EmptyDirs exist in every sandbox root, empty unless a mount lands there.
var EmptyDirs = []string{"proc", "dev", "sys", "tmp", "run", "home", "root", "mnt", "media", "srv"}

// MaskedPaths hide secrets under the kept system directories: files are
// covered with /dev/null, directories with an empty read-only tmpfs.
var MaskedPaths = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
	"/etc/ssh", "/etc/ssl/private", "/etc/docker", "/etc/containerd", "/etc/kubernetes",
	"/etc/cordon", "/var/run", "/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet",
	"/var/lib/cloud", "/var/lib/cordon", "/var/log", "/var/mail", "/var/spool", "/var/backups",
	"/var/cache/private", "/var/lib/private", "/var/lib/sudo", "/var/lib/systemd/credential.secret",
}

// ProcMasked are /proc entries no sandbox reads; ProcReadOnly are made
// read-only (as runc does).
var (
	ProcMasked   = []string{"kcore", "keys", "key-users", "timer_list", "timer_stats", "sched_debug", "latency_stats", "acpi", "asound", "scsi", "interrupts", "kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "sysrq-trigger", "config.gz", "vmallocinfo", "slabinfo", "pagetypeinfo", "zoneinfo", "buddyinfo"}
	ProcReadOnly = []string{"bus", "fs", "irq", "sys"}
)

// Devices are bound from the host's /dev (a user namespace cannot mknod).
var Devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", src, dst, fstype, err)
	}
	return nil
}

// mountScratch makes the writable directories of cfg.Tmpfs as directories
// of one tmpfs, each bound at its path, so that together (not each) they
// hold at most cfg.ScratchBytes (0: the kernel's default, half the host's
// memory). The tmpfs itself is mounted on cfg.ScratchMount, outside the
// root, and leaves with the host's tree.
func mountScratch(st string, cfg *Config) error {
	if len(cfg.Tmpfs) == 0 {
		return nil
	}
	pool := cfg.ScratchMount
	if pool == "" {
		return fmt.Errorf("scratch directories and no scratchMount to hold them")
	}
	data := "mode=0700"
	if cfg.ScratchBytes > 0 {
		data += fmt.Sprintf(",size=%d", cfg.ScratchBytes)
	}
	if err := mount("tmpfs", pool, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return err
	}
	for i, t := range cfg.Tmpfs {
		src, dst := filepath.Join(pool, strconv.Itoa(i)), filepath.Join(st, t.Path)
		if err := os.Mkdir(src, 0); err != nil {
			return err
		}
		// Mkdir's mode passes the umask and drops the sticky bit.
		if err := unix.Chmod(src, t.Mode); err != nil {
			return err
		}
		if t.Owned {
			if err := unix.Chown(src, cfg.UID, cfg.GID); err != nil {
				return err
			}
		}
		// A bind mount has the flags of the mount it comes from: nosuid,
		// nodev, and exec allowed.
		if err := mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	return nil
}

// buildRoot assembles the sandbox's root on cfg.Stage. What is read-only
// (the root's own tmpfs, the system directories, their masks and the file
// binds) is mounted first and made read-only in one recursive pass; then
// come the mounts with flags of their own (/proc, /dev, scratch and the
// directory binds), on mount points made before that pass.
func buildRoot(cfg *Config) error {
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	st := cfg.Stage
	if err := mount("tmpfs", st, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return err
	}
	ents, err := os.ReadDir(cfg.RootFS)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if cfg.HostRoot && !SystemDirs[name] {
			continue
		}
		if slices.Contains(EmptyDirs, name) {
			continue
		}
		src, dst := filepath.Join(cfg.RootFS, name), filepath.Join(st, name)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			to, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(to, dst); err != nil {
				return err
			}
		case e.IsDir():
			if err := bindTree(src, dst, true); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := bindTree(src, dst, false); err != nil {
				return err
			}
		}
	}
	for _, d := range EmptyDirs {
		if err := mkdirs(filepath.Join(st, d)); err != nil {
			return err
		}
	}
	// Mount points on the root's tmpfs, while it can still be written.
	for _, t := range cfg.Tmpfs {
		if err := mkdirs(filepath.Join(st, t.Path)); err != nil {
			return fmt.Errorf("mountpoint %s: %w", t.Path, err)
		}
	}
	for _, b := range cfg.Binds {
		if b.File {
			continue
		}
		if err := mkdirs(filepath.Join(st, b.Target)); err != nil {
			return fmt.Errorf("mountpoint %s: %w", b.Target, err)
		}
	}
	m := masker{readOnlyLater: true}
	if cfg.HostRoot {
		for _, p := range MaskedPaths {
			if err := m.mask(filepath.Join(st, p)); err != nil {
				return err
			}
		}
	}
	for _, b := range cfg.Binds {
		if !b.File {
			continue
		}
		dst := filepath.Join(st, b.Target)
		if fi, err := os.Lstat(dst); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := bindFile(st, b, dst); err != nil {
			return err
		}
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(-1, st, unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", st, err)
	}
	m.readOnlyLater = false
	if err := mountProc(filepath.Join(st, "proc"), &m); err != nil {
		return err
	}
	if err := mountDev(filepath.Join(st, "dev")); err != nil {
		return err
	}
	if err := mountScratch(st, cfg); err != nil {
		return err
	}
	for _, b := range cfg.Binds {
		if b.File {
			continue
		}
		dst := filepath.Join(st, b.Target)
		if b.Tree > 0 {
			if b.Tree > len(cfg.trees) {
				return fmt.Errorf("attach %s: layout tree %d was not sent", b.Target, b.Tree)
			}
			fd := cfg.trees[b.Tree-1]
			if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("attach %s: %w", b.Target, err)
			}
			unix.Close(fd)
			continue
		}
		if err := mount(b.Source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if b.ReadOnly {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("mount_setattr %s: %w", dst, err)
		}
	}
	return nil
}

// mkdirs makes mount point p (a directory, mode 0755) and any parents it
// lacks. Unlike os.MkdirAll it tries the directory first: on a fresh root
// most mount points are one level down, and each then costs one system
// call, not three. Something other than a directory already at p is left
// for the mount on it to refuse.
func mkdirs(p string) error {
	switch err := unix.Mkdir(p, 0o755); err {
	case nil, unix.EEXIST:
		return nil
	case unix.ENOENT:
		return os.MkdirAll(p, 0o755)
	default:
		return &os.PathError{Op: "mkdir", Path: p, Err: err}
	}
}

// bindTree binds src (a whole tree) at dst; buildRoot's read-only pass
// then makes it read-only throughout, with no setuid and no devices.
func bindTree(src, dst string, dir bool) error {
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
	} else if err := os.WriteFile(dst, nil, 0o644); err != nil {
		return err
	}
	return mount(src, dst, "", unix.MS_BIND|unix.MS_REC, "")
}

// masker covers paths with nothing: a file with /dev/null, a directory
// with an empty tmpfs, both read-only. The first of each kind is mounted
// and made read-only; every later one is a bind of that first, which takes
// its flags (a bind mount has the flags of the mount it comes from): one
// mount call each, and no source of its own to unmount afterwards.
type masker struct {
	file, dir string // the first masked file and directory
	// readOnlyLater: a read-only pass over the masks is still to come, so
	// the first file needs no read-only remount of its own.
	readOnlyLater bool
}

// mask covers p. A path that does not exist needs no mask. A symlink is
// left alone: it resolves inside the sandbox's own tree.
func (m *masker) mask(p string) error {
	st, err := os.Lstat(p)
	if err != nil || st.Mode()&os.ModeSymlink != 0 {
		return nil
	}
	if st.IsDir() {
		if m.dir != "" {
			return mount(m.dir, p, "", unix.MS_BIND, "")
		}
		if err := mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555"); err != nil {
			return err
		}
		m.dir = p
		return nil
	}
	if m.file != "" {
		return mount(m.file, p, "", unix.MS_BIND, "")
	}
	if err := mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if !m.readOnlyLater {
		if err := mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return err
		}
	}
	m.file = p
	return nil
}

func mountProc(p string, m *masker) error {
	if err := mount("proc", p, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, name := range ProcMasked {
		if err := m.mask(filepath.Join(p, name)); err != nil {
			return err
		}
	}
	for _, name := range ProcReadOnly {
		q := filepath.Join(p, name)
		if _, err := os.Stat(q); err != nil {
			continue
		}
		if name == "sys" {
			continue // after the user-namespace limit is written; see readOnlyProcSys
		}
		if err := mount(q, q, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := mount("", q, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	return nil
}

func readOnlyProcSys() error {
	if err := mount("/proc/sys", "/proc/sys", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

func mountDev(p string) error {
	if err := mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, d := range Devices {
		dst := filepath.Join(p, d)
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return err
		}
		if err := mount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	pts := filepath.Join(p, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	if err := mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	shm := filepath.Join(p, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	if err := mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return err
	}
	for link, to := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(to, filepath.Join(p, link)); err != nil {
			return err
		}
	}
	return nil
}

// enterRoot makes stage the root: pivot_root onto itself, then detach the
// old root, so nothing of the host's tree stays reachable. (The root's own
// tmpfs is read-only already: buildRoot's read-only pass.)
func enterRoot(stage string) error {
	if err := unix.Chdir(stage); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	return unix.Chdir("/")
}

// bindFile binds b's file over dst (buildRoot's read-only pass makes it
// read-only). A file given by its content is written on the stage's tmpfs,
// bound, and unlinked: the mount keeps it, and nothing else names it.
func bindFile(stage string, b Bind, dst string) error {
	src := b.Source
	if src == "" {
		f, err := os.CreateTemp(stage, ".file-")
		if err != nil {
			return err
		}
		src = f.Name()
		defer os.Remove(src)
		_, err = f.WriteString(b.Content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(src, 0o644)
		}
		if err != nil {
			return fmt.Errorf("file %s: %w", b.Target, err)
		}
	}
	return mount(src, dst, "", unix.MS_BIND, "")
}
