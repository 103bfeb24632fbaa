//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"golang.org/x/sys/unix"
)

// The file-system routes (feature "fs-ops"): stat and list under the read
// roots, mkdir and remove under the write roots, all through the same jail
// as reads and writes. Every operation acts on a descriptor the jail
// checked, never on a path that could be swapped after the check.

// jailedParent places p under roots and opens its parent directory through
// the jail, returning the parent's O_PATH descriptor, the final component
// and the placed target. The target may not be a root itself.
func jailedParent(p, workspace string, roots []string) (dfd int, base, target string, err error) {
	target, root, err := place(p, workspace, roots)
	if err != nil {
		return -1, "", "", err
	}
	rel, err := filepath.Rel(root, target)
	if err != nil || rel == "." {
		return -1, "", "", fmt.Errorf("%q is a root of the sandbox's file view and cannot be changed", target)
	}
	dir, base := filepath.Split(rel)
	dfd, _, err = openDirIn(root, dir, false)
	if err != nil {
		return -1, "", "", err
	}
	return dfd, base, target, nil
}

// jailedOpen opens p (following symlinks that stay inside its root) with
// O_PATH and checks where it landed.
func jailedOpen(p, workspace string, roots []string, extra int) (int, string, error) {
	target, root, err := place(p, workspace, roots)
	if err != nil {
		return -1, "", err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return -1, "", err
	}
	fd, err := openPath(unix.AT_FDCWD, target, extra)
	if err != nil {
		return -1, "", &os.PathError{Op: "open", Path: target, Err: err}
	}
	if _, err := checkInside(fd, realRoot); err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	return fd, target, nil
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

func infoFrom(name string, st *unix.Stat_t) wire.FileInfo {
	return wire.FileInfo{
		Name: name, Type: fileType(st.Mode), Size: st.Size, Mode: st.Mode & 0o7777,
		ModTime: st.Mtim.Sec*1000 + st.Mtim.Nsec/1e6,
	}
}

// handleStat serves GET /fs/stat?path=P.
func (s *Server) handleStat(w httpd.ResponseWriter, r *httpd.Request) {
	fd, target, err := jailedOpen(r.URL.Query().Get("path"), s.cfg.Workspace, s.cfg.ReadRoots, 0)
	if err != nil {
		fsError(w, err)
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		fsError(w, err)
		return
	}
	info := infoFrom(filepath.Base(target), &st)
	info.Path = target
	writeJSON(w, httpd.StatusOK, info)
}

// handleList serves GET /fs/list?path=P: the directory's entries, sorted,
// at most wire.MaxListEntries of them. Symlinks are reported, not followed.
func (s *Server) handleList(w httpd.ResponseWriter, r *httpd.Request) {
	pfd, target, err := jailedOpen(r.URL.Query().Get("path"), s.cfg.Workspace, s.cfg.ReadRoots, unix.O_DIRECTORY)
	if err != nil {
		fsError(w, err)
		return
	}
	defer unix.Close(pfd)
	dfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fsError(w, &os.PathError{Op: "open", Path: target, Err: err})
		return
	}
	dir := os.NewFile(uintptr(dfd), target)
	defer dir.Close()
	out := wire.ListResponse{Path: target, Entries: []wire.FileInfo{}}
	for {
		names, err := dir.Readdirnames(1024)
		for _, name := range names {
			if len(out.Entries) == wire.MaxListEntries {
				out.Truncated = true
				break
			}
			var st unix.Stat_t
			if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // removed meanwhile
			}
			e := infoFrom(name, &st)
			if e.Type == "symlink" {
				e.Target, _ = readlinkAt(dfd, name)
			}
			out.Entries = append(out.Entries, e)
		}
		if out.Truncated || errors.Is(err, io.EOF) || len(names) == 0 {
			break
		}
		if err != nil {
			fsError(w, err)
			return
		}
	}
	sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Name < out.Entries[j].Name })
	writeJSON(w, httpd.StatusOK, out)
}

func readlinkAt(dfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// handleMkdir serves POST /fs/mkdir?path=P: P and its missing parents,
// under a write root.
func (s *Server) handleMkdir(w httpd.ResponseWriter, r *httpd.Request) {
	target, root, err := place(r.URL.Query().Get("path"), s.cfg.Workspace, s.cfg.WriteRoots)
	if err == nil {
		_, err = mkdirIn(target, root)
	}
	if err != nil {
		fsError(w, err)
		return
	}
	writeJSON(w, httpd.StatusOK, wire.OKResponse{OK: true})
}

// handleRemove serves POST /fs/remove?path=P[&recursive=1]. The final
// component is removed itself (a symlink, not what it points to); a
// directory that is not empty needs recursive. The removal runs relative
// to the parent directory the jail opened, so nothing outside the root can
// be reached by swapping a parent for a symlink.
func (s *Server) handleRemove(w httpd.ResponseWriter, r *httpd.Request) {
	q := r.URL.Query()
	dfd, base, target, err := jailedParent(q.Get("path"), s.cfg.Workspace, s.cfg.WriteRoots)
	if err != nil {
		fsError(w, err)
		return
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		fsError(w, &os.PathError{Op: "remove", Path: target, Err: err})
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		err = unix.Unlinkat(dfd, base, 0)
	} else if q.Get("recursive") == "1" || q.Get("recursive") == "true" {
		// RemoveAll walks with openat and O_NOFOLLOW below the anchor.
		err = os.RemoveAll("/proc/self/fd/" + strconv.Itoa(dfd) + "/" + base)
	} else {
		err = unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR)
	}
	if err != nil {
		fsError(w, &os.PathError{Op: "remove", Path: target, Err: unwrapPathErr(err)})
		return
	}
	writeJSON(w, httpd.StatusOK, wire.OKResponse{OK: true})
}

// handleRename serves POST /fs/rename?path=P&to=Q: P, under a write root,
// becomes Q, replacing a file Q names as rename(2) does. Both parents are
// opened through the jail and the final components renamed relative to
// them, so a symlink P is moved itself, and nothing outside the roots can
// be reached by swapping a parent. The write roots are file systems of
// their own: a move between them is refused, saying so.
func (s *Server) handleRename(w httpd.ResponseWriter, r *httpd.Request) {
	q := r.URL.Query()
	if q.Get("to") == "" {
		fsError(w, errors.New("to: the path to move it to is required"))
		return
	}
	fromDir, fromBase, from, err := jailedParent(q.Get("path"), s.cfg.Workspace, s.cfg.WriteRoots)
	if err != nil {
		fsError(w, err)
		return
	}
	defer unix.Close(fromDir)
	toDir, toBase, to, err := jailedParent(q.Get("to"), s.cfg.Workspace, s.cfg.WriteRoots)
	if err != nil {
		fsError(w, err)
		return
	}
	defer unix.Close(toDir)
	if err := unix.Renameat(fromDir, fromBase, toDir, toBase); err != nil {
		if errors.Is(err, unix.EXDEV) {
			err = fmt.Errorf("%s and %s are on different file systems of the sandbox (its writable directories are each its own): copy it, then remove it", from, to)
		}
		fsError(w, &os.PathError{Op: "rename", Path: from, Err: err})
		return
	}
	var st unix.Stat_t
	if err := unix.Fstatat(toDir, toBase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		fsError(w, &os.PathError{Op: "stat", Path: to, Err: err})
		return
	}
	info := infoFrom(toBase, &st)
	info.Path = to
	writeJSON(w, httpd.StatusOK, info)
}

func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// fsError answers a refused file-system operation of cordon's own routes
// (the reference's /read-file and /write-file answer 400 to all), with a
// sentence in "error" as the file routes do: 404 when the path does not
// exist, 403 where the sandbox may not (outside the roots, permissions, a
// read-only file system), 507 when the writable space is full, else 400.
func fsError(w httpd.ResponseWriter, err error) {
	status := httpd.StatusBadRequest
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist):
		status = httpd.StatusNotFound
	case errors.Is(err, errEscapes), errors.Is(err, errLinkEscapes), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		status = httpd.StatusForbidden
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		status = httpd.StatusInsufficientStorage
	}
	writeJSON(w, status, wire.FileError{OK: false, Error: err.Error()})
}
