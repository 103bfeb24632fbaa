package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The path jail. A request path is first placed lexically (relative paths
// under the workspace, absolute paths under one of the roots), then opened
// with O_PATH by the kernel, and the opened object's own path (from
// /proc/self/fd) must lie inside that root. The check is on the descriptor,
// not on a path that could be swapped afterwards, so a symlink raced in
// between never leaks a byte: whatever the kernel opened is what is checked
// and what is read. Writes walk one directory at a time the same way, so no
// directory or file is ever created outside a write root.

var (
	errEscapes     = errors.New("path escapes the workspace")
	errLinkEscapes = errors.New("symlink escapes the workspace")
)

// place resolves p lexically and returns the target path and the root it
// must stay inside.
func place(p, workspace string, roots []string) (target, root string, err error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", "", errors.New("path contains a NUL byte")
	}
	if !filepath.IsAbs(p) {
		target = filepath.Join(workspace, p)
		if !within(target, workspace) {
			return "", "", errEscapes
		}
		return target, workspace, nil
	}
	target = filepath.Clean(p)
	for _, r := range roots {
		if within(target, r) {
			return target, r, nil
		}
	}
	return "", "", outside{target, roots}
}

// outside is errEscapes for an absolute path, naming the places it may be.
type outside struct {
	path  string
	roots []string
}

func (o outside) Error() string {
	return o.path + " is outside the places this request may reach (" + strings.Join(o.roots, ", ") + ")"
}

func (o outside) Is(target error) bool { return target == errEscapes }

func within(p, root string) bool {
	if root == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

// openPath opens name (relative to dirfd) with O_PATH, following symlinks
// but never magic links, and returns the descriptor.
func openPath(dirfd int, name string, extra int) (int, error) {
	how := unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_CLOEXEC | extra), Resolve: unix.RESOLVE_NO_MAGICLINKS}
	for !noOpenat2.Load() {
		fd, err := unix.Openat2(dirfd, name, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
			// EPERM: a filter that refuses the call outright (an O_PATH
			// open has no other cause for it), as a 2022 gVisor applies
			// the baseline's profile, not knowing openat2 to allow it.
			noOpenat2.Store(true)
			continue
		}
		return -1, err
	}
	// No openat2 (old kernels, some user-space kernels, and every sandbox
	// whose seccomp filter answers it ENOSYS, since its mode cannot be
	// inspected): the descriptor check below is the guard either way.
	return unix.Openat(dirfd, name, unix.O_PATH|unix.O_CLOEXEC|extra, 0)
}

// noOpenat2 is set once openat2 answered ENOSYS or EPERM.
var noOpenat2 atomic.Bool

// fdPath is the kernel's name for what fd refers to.
func fdPath(fd int) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("cannot confirm where a path leads (is /proc mounted?): %w", err)
	}
	return p, nil
}

// checkInside closes fd and fails unless it refers to something inside realRoot.
func checkInside(fd int, realRoot string) (string, error) {
	p, err := fdPath(fd)
	if err == nil && !within(p, realRoot) {
		err = errLinkEscapes
	}
	if err != nil {
		unix.Close(fd)
		return "", err
	}
	return p, nil
}

// openForRead opens a regular file inside root for reading. Special files
// (FIFOs, devices, sockets) are refused before they are opened for reading,
// so a FIFO never hangs a handler.
func openForRead(target, root string) (*os.File, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	pfd, err := openPath(unix.AT_FDCWD, target, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: target, Err: err}
	}
	if _, err := checkInside(pfd, realRoot); err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil, fmt.Errorf("EISDIR: illegal operation on a directory, read %q", target)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%q is not a regular file", target)
	}
	// Reopen the very object checked above, for reading.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: target, Err: err}
	}
	return os.NewFile(uintptr(fd), target), nil
}

// openDirIn walks rel (a path below root, "" for root itself) one component
// at a time, creating missing directories when create is set, and checks
// after every step that it is still inside root. It returns an O_PATH
// descriptor of the directory and its real path.
func openDirIn(root, rel string, create bool) (int, string, error) {
	if create {
		if err := os.MkdirAll(root, 0o777); err != nil {
			return -1, "", err
		}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return -1, "", err
	}
	dfd, err := openPath(unix.AT_FDCWD, realRoot, unix.O_DIRECTORY)
	if err != nil {
		return -1, "", err
	}
	real, err := checkInside(dfd, realRoot)
	if err != nil {
		return -1, "", err
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		next, err := openPath(dfd, c, unix.O_DIRECTORY)
		if errors.Is(err, unix.ENOENT) && create {
			if err := unix.Mkdirat(dfd, c, 0o777); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(dfd)
				return -1, "", &os.PathError{Op: "mkdir", Path: filepath.Join(real, c), Err: err}
			}
			next, err = openPath(dfd, c, unix.O_DIRECTORY)
		}
		unix.Close(dfd)
		if err != nil {
			return -1, "", &os.PathError{Op: "open", Path: filepath.Join(real, c), Err: err}
		}
		if real, err = checkInside(next, realRoot); err != nil {
			return -1, "", err
		}
		dfd = next
	}
	return dfd, real, nil
}

// mkdirIn creates target (inside root) and its parents, and returns its real
// path. It is how an execution's cwd comes to exist.
func mkdirIn(target, root string) (string, error) {
	rel, err := filepath.Rel(root, target)
	if err != nil {
		return "", err
	}
	fd, real, err := openDirIn(root, rel, true)
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	return real, nil
}

// writeFileIn atomically replaces target (inside root) with what data
// yields (beforeCommit, if set, may still veto the replacement): a
// temporary sibling is written and fsynced, renamed over the target, and the
// directory is fsynced. A failed write leaves the previous contents. An
// existing symlink is written through only when its target is a regular
// file inside the same root; a dangling one is refused, because following it
// could create a file anywhere.
func writeFileIn(target, root string, data io.Reader, beforeCommit func() error) (int64, error) {
	return writeFileMode(target, root, data, beforeCommit, -1)
}

// writeFileMode is writeFileIn giving the file the permission bits perm
// (0-0777; -1 keeps an existing file's, or the default).
func writeFileMode(target, root string, data io.Reader, beforeCommit func() error, perm int) (int64, error) {
	rel, err := filepath.Rel(root, target)
	if err != nil || rel == "." {
		return 0, fmt.Errorf("EISDIR: illegal operation on a directory, open %q", target)
	}
	dir, base := filepath.Split(rel)
	dfd, _, err := openDirIn(root, dir, true)
	if err != nil {
		return 0, err
	}
	defer func() { unix.Close(dfd) }()

	mode, uid, gid := uint32(0o666), -1, -1
	var st unix.Stat_t
	err = unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return 0, &os.PathError{Op: "stat", Path: target, Err: err}
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		lfd, err := openPath(dfd, base, 0)
		if errors.Is(err, unix.ENOENT) {
			return 0, fmt.Errorf("refusing to write through the dangling symlink %q", target)
		}
		if err != nil {
			return 0, &os.PathError{Op: "open", Path: target, Err: err}
		}
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			unix.Close(lfd)
			return 0, err
		}
		real, err := checkInside(lfd, realRoot)
		if err != nil {
			return 0, err
		}
		unix.Close(lfd)
		// Write where the link leads, by walking to it from the root again.
		r, _ := filepath.Rel(realRoot, real)
		return writeFileMode(filepath.Join(root, r), root, data, beforeCommit, perm)
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return 0, fmt.Errorf("EISDIR: illegal operation on a directory, open %q", target)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return 0, fmt.Errorf("%q is not a regular file", target)
	default:
		// Permission bits carry over; setuid and setgid never do, as with
		// an ordinary write by an unprivileged writer.
		mode, uid, gid = st.Mode&0o777, int(st.Uid), int(st.Gid)
	}

	// An O_PATH descriptor cannot be fsynced; open the directory for real.
	wdfd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(wdfd)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	short := base
	if len(short) > 200 {
		short = short[:200]
	}
	tmp := "." + short + ".cordon-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(wdfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: target, Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		if !ok {
			_ = unix.Unlinkat(wdfd, tmp, 0)
		}
	}()
	n, err := io.Copy(f, data)
	if err != nil {
		f.Close()
		return 0, err
	}
	if uid >= 0 {
		_ = f.Chown(uid, gid)
		_ = f.Chmod(os.FileMode(mode))
	}
	if perm >= 0 {
		if err := f.Chmod(os.FileMode(perm) & os.ModePerm); err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	if beforeCommit != nil {
		if err := beforeCommit(); err != nil {
			return 0, err
		}
	}
	if err := unix.Renameat(wdfd, tmp, wdfd, base); err != nil {
		return 0, &os.PathError{Op: "rename", Path: target, Err: err}
	}
	ok = true
	return n, unix.Fsync(wdfd)
}
