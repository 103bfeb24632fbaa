package sandboxinit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/cordon-sandbox/cordon/agent/clonexec"
	"github.com/cordon-sandbox/cordon/baseline"
	"golang.org/x/sys/unix"
)

// The sandbox root's mount plan: what buildRoot mounts on the stage,
// and how the stage becomes the root (enter).

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", src, dst, fstype, err)
	}
	return nil
}

// The root is built from a plan: the system calls buildRoot would make,
// decided before any is made (planRoot). The init makes them itself
// (buildRoot), or a clonexec helper makes them beside the init's own start
// (RootHelper): the same calls, either way.

// rootCall is one system call of a root's plan.
type rootCall struct {
	name   string
	nr     uintptr
	args   []uintptr
	except unix.Errno   // an error that is no failure (EEXIST for a mount point)
	ignore bool         // no result is a failure
	from   int          // when above zero, the first argument is call from-1's result
	goOnly func() error // a step no helper can make (a file written with content)
}

// rootPlan is planRoot's work: the calls, and what it knows of the root
// they make.
type rootPlan struct {
	cfg   *Config
	calls []rootCall
	keep  []any           // what the calls' arguments point into
	made  map[string]bool // directories the plan makes on the root's own tmpfs (root paths)
	// fromRoot: top-level names the root takes from cfg.RootFS (bound
	// trees and files, symlinks). Below them the root shows RootFS.
	fromRoot map[string]bool
}

func (p *rootPlan) str(s string) uintptr {
	b, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err) // planRoot checks every path for NUL first
	}
	p.keep = append(p.keep, b)
	return uintptr(unsafe.Pointer(b))
}

func (p *rootPlan) call(name string, nr uintptr, args ...uintptr) {
	p.calls = append(p.calls, rootCall{name: name, nr: nr, args: args})
}

var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()

func (p *rootPlan) mount(src, dst, fstype string, flags uintptr, data string) {
	var d uintptr // NULL, not "", for no data: some file systems refuse ""
	if data != "" {
		d = p.str(data)
	}
	p.call(fmt.Sprintf("mount %s on %s (%s)", src, dst, fstype), unix.SYS_MOUNT, p.str(src), p.str(dst), p.str(fstype), flags, d)
}

// mkdir makes directory dst; with mayExist, an existing one will do.
func (p *rootPlan) mkdir(dst string, mode uint32, mayExist bool) {
	c := rootCall{name: "mkdir " + dst, nr: unix.SYS_MKDIRAT, args: []uintptr{atFDCWD, p.str(dst), uintptr(mode)}}
	if mayExist {
		c.except = unix.EEXIST
	}
	p.calls = append(p.calls, c)
}

// file makes an empty regular file (a mount point for a file).
func (p *rootPlan) file(dst string, mode uint32) {
	p.call("create "+dst, unix.SYS_MKNODAT, atFDCWD, p.str(dst), uintptr(unix.S_IFREG|mode), 0)
}

func (p *rootPlan) setattr(dst string, set uint64) {
	attr := &unix.MountAttr{Attr_set: set}
	p.keep = append(p.keep, attr)
	p.call("mount_setattr "+dst, unix.SYS_MOUNT_SETATTR, atFDCWD, p.str(dst), unix.AT_RECURSIVE, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
}

// lstat is what an lstat of root path q will find once the calls planned
// so far are made: RootFS's file below what the root takes from it, a
// directory the plan made, or nothing. (Before the root is entered, a
// symlink in RootFS with an absolute target resolves on the host, for the
// root's builder as for this.)
func (p *rootPlan) lstat(q string) (os.FileInfo, bool) {
	if p.made[q] {
		return dirInfo{}, true
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(q, "/"), "/")
	if !p.fromRoot[first] {
		return nil, false
	}
	fi, err := os.Lstat(filepath.Join(p.cfg.RootFS, q))
	return fi, err == nil
}

// dirInfo is lstat's answer for a directory the plan makes.
type dirInfo struct{ os.FileInfo }

func (dirInfo) IsDir() bool       { return true }
func (dirInfo) Mode() os.FileMode { return os.ModeDir | 0o755 }

// mkdirs makes mount point q (a root path; a directory, mode 0755) and the
// parents it lacks, as os.MkdirAll would on the stage. What exists already
// will do; something other than a directory there is left for the mount on
// it to refuse.
func (p *rootPlan) mkdirs(q string) {
	q = filepath.Clean(q)
	var prefix string
	for i, c := range strings.Split(strings.TrimPrefix(q, "/"), "/") {
		prefix += "/" + c
		if p.made[prefix] || (i == 0 && p.fromRoot[c]) {
			continue
		}
		p.mkdir(filepath.Join(p.cfg.Stage, prefix), 0o755, true)
		if i == 0 || p.made[filepath.Dir(prefix)] {
			p.made[prefix] = true // on the root's own tmpfs
		}
	}
}

// planRoot plans the sandbox's root on cfg.Stage. What is read-only (the
// root's own tmpfs, the system directories, their masks and the file
// binds) is mounted first and made read-only in one recursive pass; then
// come the mounts with flags of their own (/proc, /dev, scratch and the
// directory binds), on mount points made before that pass. trees gives
// the descriptor of layout tree i (1-based).
func planRoot(cfg *Config, trees func(i int) (int, error)) (*rootPlan, error) {
	for _, s := range cfg.paths() {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("a path of the configuration holds a NUL byte: %q", s)
		}
	}
	p := &rootPlan{cfg: cfg, made: map[string]bool{}, fromRoot: map[string]bool{}}
	p.mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	st := cfg.Stage
	p.mount("tmpfs", st, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m")
	ents, err := os.ReadDir(cfg.RootFS)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		name := e.Name()
		if cfg.HostRoot && !baseline.SystemDirs[name] {
			continue
		}
		if slices.Contains(baseline.EmptyDirs, name) {
			continue
		}
		src, dst := filepath.Join(cfg.RootFS, name), filepath.Join(st, name)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			to, err := os.Readlink(src)
			if err != nil {
				return nil, err
			}
			p.call("symlink "+dst, unix.SYS_SYMLINKAT, p.str(to), atFDCWD, p.str(dst))
		case e.IsDir():
			p.mkdir(dst, 0o755, true)
			p.mount(src, dst, "", unix.MS_BIND|unix.MS_REC, "")
		case e.Type().IsRegular():
			p.file(dst, 0o644)
			p.mount(src, dst, "", unix.MS_BIND|unix.MS_REC, "")
		default:
			continue
		}
		p.fromRoot[name] = true
	}
	for _, d := range baseline.EmptyDirs {
		p.mkdirs("/" + d)
	}
	// Mount points on the root's tmpfs, while it can still be written.
	for _, t := range cfg.Tmpfs {
		p.mkdirs(t.Path)
	}
	for _, b := range cfg.Binds {
		if !b.File {
			p.mkdirs(b.Target)
		}
	}
	m := masker{plan: p, readOnlyLater: true}
	if cfg.HostRoot {
		for _, q := range baseline.MaskedPaths {
			m.mask(filepath.Join(st, q), p.lstat)
		}
	}
	for _, b := range cfg.Binds {
		if !b.File {
			continue
		}
		if fi, ok := p.lstat(b.Target); !ok || !fi.Mode().IsRegular() {
			continue
		}
		p.bindFile(b, filepath.Join(st, b.Target))
	}
	p.setattr(st, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	m.readOnlyLater = false
	p.proc(filepath.Join(st, "proc"), &m)
	p.dev(filepath.Join(st, "dev"))
	if err := p.scratch(); err != nil {
		return nil, err
	}
	for _, b := range cfg.Binds {
		if b.File {
			continue
		}
		dst := filepath.Join(st, b.Target)
		if b.Tree > 0 {
			fd, err := trees(b.Tree)
			if err != nil {
				return nil, fmt.Errorf("attach %s: %w", b.Target, err)
			}
			p.call("attach "+b.Target, unix.SYS_MOVE_MOUNT, uintptr(fd), p.str(""), atFDCWD, p.str(dst), unix.MOVE_MOUNT_F_EMPTY_PATH)
			p.call("close the tree of "+b.Target, unix.SYS_CLOSE, uintptr(fd))
			continue
		}
		p.mount(b.Source, dst, "", unix.MS_BIND|unix.MS_REC, "")
		set := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
		if b.ReadOnly {
			set |= unix.MOUNT_ATTR_RDONLY
		}
		p.setattr(dst, set)
	}
	p.namespaces()
	p.enter()
	return p, nil
}

// namespaces sets up what the sandbox's namespaces hold besides the root:
// its hostname, its loopback interface up (a new network namespace has
// it down), and nested user namespaces refused by a limit of 0 (seccomp
// refuses them too), which /proc/sys, read-only from then on, keeps.
func (p *rootPlan) namespaces() {
	host := append([]byte(p.cfg.Hostname), 0)
	p.keep = append(p.keep, host)
	p.call("sethostname", unix.SYS_SETHOSTNAME, uintptr(unsafe.Pointer(&host[0])), uintptr(len(p.cfg.Hostname)))

	sock := len(p.calls)
	p.call("loopback: socket", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	// A new namespace's lo has IFF_LOOPBACK alone among its flags, which
	// the kernel keeps: asking for IFF_UP raises it and changes nothing
	// else.
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		panic(err) // "lo" is a valid name
	}
	ifr.SetUint16(unix.IFF_UP)
	p.keep = append(p.keep, ifr)
	p.calls = append(p.calls,
		rootCall{name: "loopback up", nr: unix.SYS_IOCTL, args: []uintptr{0, unix.SIOCSIFFLAGS, uintptr(unsafe.Pointer(ifr))}, from: sock + 1},
		rootCall{name: "loopback: close", nr: unix.SYS_CLOSE, args: []uintptr{0}, from: sock + 1})

	sys := filepath.Join(p.cfg.Stage, "proc", "sys")
	p.sysctl(filepath.Join(sys, "user", "max_user_namespaces"), "0")
	// System V IPC is the sandbox's IPC namespace's, whose defaults are
	// no limits to speak of, and its objects outlive the processes that
	// made them: without a memory limit, those a sandbox left behind held
	// the host's memory where no OOM kill could free it. (A kernel older
	// than 5.19 keeps these files the host's: the memory limit alone
	// bounds them there.)
	for _, c := range baseline.SysVIPC {
		p.sysctl(filepath.Join(sys, filepath.FromSlash(c[0])), c[1])
	}
	p.mount(sys, sys, "", unix.MS_BIND|unix.MS_REC, "")
	p.mount("", sys, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// sysctl writes value to the sysctl file at path, the sandbox's own
// namespaces' where the file is per namespace; a kernel that refuses it
// leaves it as it was.
func (p *rootPlan) sysctl(path, value string) {
	b := []byte(value)
	p.keep = append(p.keep, b)
	open := len(p.calls)
	name := filepath.Base(path)
	p.calls = append(p.calls,
		rootCall{name: "open " + name, nr: unix.SYS_OPENAT, args: []uintptr{atFDCWD, p.str(path), unix.O_WRONLY | unix.O_CLOEXEC}, ignore: true},
		rootCall{name: "write " + name, nr: unix.SYS_WRITE, args: []uintptr{0, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b))}, from: open + 1, ignore: true},
		rootCall{name: "close " + name, nr: unix.SYS_CLOSE, args: []uintptr{0}, from: open + 1, ignore: true})
}

// paths are the configuration's strings that become system call arguments.
func (c *Config) paths() []string {
	out := []string{c.Stage, c.RootFS, c.ScratchMount}
	for _, t := range c.Tmpfs {
		out = append(out, t.Path)
	}
	for _, b := range c.Binds {
		out = append(out, b.Source, b.Target)
	}
	return out
}

// buildRoot builds the root in this process (the init's own start being
// over), as planRoot plans it.
func buildRoot(cfg *Config) error {
	p, err := planRoot(cfg, func(i int) (int, error) {
		if i > len(cfg.trees) {
			return -1, fmt.Errorf("layout tree %d was not sent", i)
		}
		return cfg.trees[i-1], nil
	})
	if err != nil {
		return err
	}
	results := make([]uintptr, len(p.calls))
	for i, c := range p.calls {
		if c.goOnly != nil {
			if err := c.goOnly(); err != nil {
				return err
			}
			continue
		}
		var a [6]uintptr
		copy(a[:], c.args)
		if c.from > 0 {
			a[0] = results[c.from-1]
		}
		r, _, e := unix.Syscall6(c.nr, a[0], a[1], a[2], a[3], a[4], a[5])
		results[i] = r
		if e != 0 {
			results[i] = -uintptr(e) // as the helper has it
		}
		if e != 0 && e != c.except && !c.ignore {
			return fmt.Errorf("%s: %w", c.name, e)
		}
	}
	runtime.KeepAlive(p.keep)
	return nil
}

// RootHelper adds to h the calls that build the root cfg describes: the
// init then waits for the helper (Config.RootBuilder) instead of building
// it. The helper finds layout tree i at descriptor treeFD(i). It refuses a
// plan a helper cannot make (a file given by its content, which the init
// writes); h may then hold some of the calls, and must not be started.
func RootHelper(h *clonexec.Helper, cfg *Config, treeFD func(i int) int) error {
	p, err := planRoot(cfg, func(i int) (int, error) { return treeFD(i), nil })
	if err != nil {
		return err
	}
	base := h.Len()
	for _, c := range p.calls {
		if c.goOnly != nil {
			return fmt.Errorf("%s: only the init can make it", c.name)
		}
		hc := clonexec.HelperCall{Name: c.name, Nr: c.nr, Args: c.args, Except: c.except, Ignore: c.ignore}
		if c.from > 0 {
			hc.From = base + c.from
		}
		h.Add(hc)
	}
	h.Keep(p.keep)
	return nil
}

// masker covers paths with nothing: a file with /dev/null, a directory
// with an empty tmpfs, both read-only. The first of each kind is mounted
// and made read-only; every later one is a bind of that first, which takes
// its flags (a bind mount has the flags of the mount it comes from): one
// mount call each, and no source of its own to unmount afterwards.
type masker struct {
	plan      *rootPlan
	file, dir string // the first masked file and directory
	// readOnlyLater: a read-only pass over the masks is still to come, so
	// the first file needs no read-only remount of its own.
	readOnlyLater bool
}

// mask covers stage path q, whose root path lstat looks up. A path that
// does not exist needs no mask. A symlink is left alone: it resolves
// inside the sandbox's own tree.
func (m *masker) mask(q string, lstat func(string) (os.FileInfo, bool)) {
	fi, ok := lstat(strings.TrimPrefix(q, m.plan.cfg.Stage))
	if !ok || fi.Mode()&os.ModeSymlink != 0 {
		return
	}
	p := m.plan
	if fi.IsDir() {
		if m.dir != "" {
			p.mount(m.dir, q, "", unix.MS_BIND, "")
			return
		}
		p.mount("tmpfs", q, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		m.dir = q
		return
	}
	if m.file != "" {
		p.mount(m.file, q, "", unix.MS_BIND, "")
		return
	}
	p.mount("/dev/null", q, "", unix.MS_BIND, "")
	if !m.readOnlyLater {
		p.mount("", q, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
	}
	m.file = q
}

// proc mounts the sandbox's /proc at q (a process of the sandbox's PID
// namespace makes it) with baseline.ProcMasked masked and baseline.ProcReadOnly read-only.
// Which entries exist is the kernel's, the same in this /proc as in that.
func (p *rootPlan) proc(q string, m *masker) {
	p.mount("proc", q, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	hostProc := func(path string) (os.FileInfo, bool) {
		fi, err := os.Lstat(filepath.Join("/proc", strings.TrimPrefix(path, "/proc")))
		return fi, err == nil
	}
	for _, name := range baseline.ProcMasked {
		m.mask(filepath.Join(q, name), hostProc)
	}
	for _, name := range baseline.ProcReadOnly {
		if _, err := os.Stat(filepath.Join("/proc", name)); err != nil {
			continue
		}
		if name == "sys" {
			continue // after the user-namespace limit is written; see namespaces
		}
		e := filepath.Join(q, name)
		p.mount(e, e, "", unix.MS_BIND|unix.MS_REC, "")
		p.mount("", e, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}
}

// dev makes a minimal /dev at q: the host's harmless devices bound (a user
// namespace cannot mknod them), a private devpts, a tmpfs for shm.
func (p *rootPlan) dev(q string) {
	p.mount("tmpfs", q, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k")
	for _, d := range baseline.Devices {
		dst := filepath.Join(q, d)
		p.file(dst, 0o666)
		p.mount("/dev/"+d, dst, "", unix.MS_BIND, "")
	}
	pts := filepath.Join(q, "pts")
	p.mkdir(pts, 0o755, false)
	p.mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, strings.Join(baseline.DevptsOptions, ","))
	shm := filepath.Join(q, "shm")
	p.mkdir(shm, 0o777, false) // the tmpfs's mode=1777 is what shows
	p.mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, strings.Join(baseline.ShmOptions(), ","))
	for _, link := range [][2]string{{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}} {
		dst := filepath.Join(q, link[0])
		p.call("symlink "+dst, unix.SYS_SYMLINKAT, p.str(link[1]), atFDCWD, p.str(dst))
	}
}

// scratch makes the writable directories of cfg.Tmpfs as directories of
// one tmpfs, each bound at its path, so that together (not each) they hold
// at most cfg.ScratchBytes (0: the kernel's default, half the host's
// memory). The tmpfs itself is mounted on cfg.ScratchMount, outside the
// root, and leaves with the host's tree.
func (p *rootPlan) scratch() error {
	cfg := p.cfg
	if len(cfg.Tmpfs) == 0 {
		return nil
	}
	pool := cfg.ScratchMount
	if pool == "" {
		return fmt.Errorf("scratch directories and no scratchMount to hold them")
	}
	if !cfg.ScratchOnDisk {
		data := "mode=0700"
		if cfg.ScratchBytes > 0 {
			data += "," + strings.Join(baseline.TmpfsLimits(cfg.ScratchBytes), ",")
		}
		p.mount("tmpfs", pool, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data)
	}
	for _, t := range cfg.Tmpfs {
		// Named by path, so that a disk's directories are found again
		// whatever the list's order.
		src, dst := filepath.Join(pool, baseline.ScratchName(t.Path)), filepath.Join(cfg.Stage, t.Path)
		p.mkdir(src, 0, cfg.ScratchOnDisk)
		// mkdir's mode passes the umask and drops the sticky bit.
		p.call("chmod "+src, unix.SYS_FCHMODAT, atFDCWD, p.str(src), uintptr(t.Mode), 0)
		if t.Owned {
			p.call("chown "+src, unix.SYS_FCHOWNAT, atFDCWD, p.str(src), uintptr(cfg.UID), uintptr(cfg.GID), 0)
		}
		// A bind mount has the flags of the mount it comes from: nosuid,
		// nodev, and exec allowed.
		p.mount(src, dst, "", unix.MS_BIND, "")
	}
	return nil
}

// enter makes the stage the root, last of the plan: pivot_root onto
// itself, then detach the old root, so nothing of the host's tree stays
// reachable (the scratch pool's mount leaves with it). The root's own
// tmpfs is read-only already: the plan's read-only pass. pivot_root moves
// the root and working directory of every process of the namespace that
// had the old root as either: a helper that makes these calls enters the
// init too, whose working directory is the old root (the host starts it
// in "/"), and the init's later chdir is relative to the new root.
func (p *rootPlan) enter() {
	dot := p.str(".")
	p.call("chdir "+p.cfg.Stage, unix.SYS_CHDIR, p.str(p.cfg.Stage))
	p.call("pivot_root", unix.SYS_PIVOT_ROOT, dot, dot)
	p.call("detach the old root", unix.SYS_UMOUNT2, dot, unix.MNT_DETACH)
	p.call("chdir /", unix.SYS_CHDIR, p.str("/"))
}

// bindFile binds b's file over dst (the read-only pass makes it
// read-only). A file given by its content is written on the stage's tmpfs,
// bound, and unlinked: the mount keeps it, and nothing else names it. Only
// the init writes it (goOnly).
func (p *rootPlan) bindFile(b Bind, dst string) {
	if b.Source != "" {
		p.mount(b.Source, dst, "", unix.MS_BIND, "")
		return
	}
	stage := p.cfg.Stage
	p.calls = append(p.calls, rootCall{name: "file " + b.Target, goOnly: func() error {
		f, err := os.CreateTemp(stage, ".file-")
		if err != nil {
			return err
		}
		src := f.Name()
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
		return mount(src, dst, "", unix.MS_BIND, "")
	}})
}
