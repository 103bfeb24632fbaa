package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// ExactDir opens the directory at path, which must be absolute and hold no
// symbolic link: what was checked (a daemon admits only paths under its
// --host-path roots, by their real path) is then what is used, however
// long after (a persistent sandbox's every start). A link placed on the
// way since, by whoever may write a directory on it (a sandbox through a
// read-write layout directory), would otherwise lead to any directory of
// the host. what names the path in the error.
func ExactDir(what, path string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	switch {
	case errors.Is(err, unix.ELOOP):
		real, _ := filepath.EvalSymlinks(path)
		return nil, fmt.Errorf("%w: %s: %s has a symbolic link on its way (it leads to %s): name the directory by its real path", sandbox.ErrInvalidSpec, what, path, real)
	case errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("%w: %s: %s is not a directory", sandbox.ErrInvalidSpec, what, path)
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %s: %v", sandbox.ErrInvalidSpec, what, path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// RootFS is the absolute path of a spec's root filesystem, checked as
// ExactDir checks it (the tier then mounts it by that path).
func RootFS(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	dir, err := ExactDir("the root filesystem", abs)
	if err != nil {
		return "", err
	}
	dir.Close()
	return abs, nil
}

// LayoutMounts lists the spec's layout directories, checked to exist, each
// with the host user the sandbox user is there: the directory's owner, or
// for a read-write one l.Owner when given. A read-write directory whose
// writes would be root's is refused: what the sandbox made there would be
// root's on the host (a file root's programs trust, a cron job).
func LayoutMounts(l sandbox.Layout) ([]LayoutMount, error) {
	var out []LayoutMount
	for _, m := range []struct {
		host, name string
		ro         bool
	}{
		{l.Outputs, "outputs", false}, {l.Uploads, "uploads", true}, {l.Scratch, "scratch", false},
		{l.ToolResults, "tool-results", true}, {l.Transcripts, "transcripts", true}, {l.Skills, "skills", true},
	} {
		if m.host == "" {
			continue
		}
		abs, err := filepath.Abs(m.host)
		if err != nil {
			return nil, err
		}
		dir, err := ExactDir("layout "+m.name, abs)
		if err != nil {
			return nil, err
		}
		st, err := dir.Stat()
		dir.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: layout %s: %v", sandbox.ErrInvalidSpec, m.name, err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		lm := LayoutMount{Host: abs, Target: baseline.LayoutRoot + "/" + m.name, ReadOnly: m.ro, UID: int(sys.Uid), GID: int(sys.Gid)}
		lm.DirUID, lm.DirGID = lm.UID, lm.GID
		if !m.ro && l.Owner != nil {
			lm.UID, lm.GID = l.Owner.UID, l.Owner.GID
		}
		if !m.ro && (lm.UID == 0 || lm.GID == 0) {
			return nil, fmt.Errorf("%w: layout %s: the sandbox would write %s as %d:%d, root's user or group on the host; "+
				"give the directory to an unprivileged user and group (chown), or name one for the sandbox to write as (--mount-owner UID:GID; layout.owner)",
				sandbox.ErrInvalidSpec, m.name, abs, lm.UID, lm.GID)
		}
		out = append(out, lm)
	}
	return out, nil
}

// IdmappedTrees clones each layout directory into a detached mount whose
// ids are mapped so that its host user and group (LayoutMount.UID, GID)
// are the sandbox user inside: what the sandbox writes lands on the host
// owned by them, and nothing is chowned. The trees are handed to the init, which
// attaches them.
func IdmappedTrees(agent string, mounts []LayoutMount, kuid, kgid int) ([]*os.File, error) {
	var files []*os.File
	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	for _, m := range mounts {
		userns, err := holdUserns(agent, idmap{m.UID, m.GID, kuid, kgid, m.DirUID, m.DirGID})
		if err != nil {
			return fail(err)
		}
		// The directory at exactly that path: a link placed on its way
		// since it was checked leads nowhere.
		dir, err := ExactDir("layout", m.Host)
		if err != nil {
			userns.Close()
			return fail(err)
		}
		fd, err := unix.OpenTree(int(dir.Fd()), "", unix.AT_EMPTY_PATH|unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		dir.Close()
		if err != nil {
			userns.Close()
			return fail(fmt.Errorf("%w: clone %s: %v", sandbox.ErrUnavailable, m.Host, err))
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(userns.Fd())}
		if m.ReadOnly {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
		userns.Close()
		if err != nil {
			unix.Close(fd)
			return fail(fmt.Errorf("%w: id-mapped mount of %s (needs a kernel and file system with id-mapped mounts): %v", sandbox.ErrUnavailable, m.Host, err))
		}
		files = append(files, os.NewFile(uintptr(fd), m.Host))
	}
	return files, nil
}

// idmap is an id-mapped mount's mapping: host uid and gid (on disk, inside
// the namespace describing it) are the sandbox user's kuid and kgid
// (outside it). A directory owned by others (dirUID, dirGID) maps them too,
// to the host's overflow ids: the kernel lets nobody write under an inode
// whose owner a mount does not map, and the sandbox then meets the
// directory as anyone's, through its mode.
type idmap struct{ uid, gid, kuid, kgid, dirUID, dirGID int }

// overflowID is the host's nobody, which an id-mapped directory's other
// owner is mapped to.
const overflowID = 65534

func (m idmap) uids() []syscall.SysProcIDMap {
	out := []syscall.SysProcIDMap{{ContainerID: m.uid, HostID: m.kuid, Size: 1}}
	if m.dirUID != m.uid && m.kuid != overflowID {
		out = append(out, syscall.SysProcIDMap{ContainerID: m.dirUID, HostID: overflowID, Size: 1})
	}
	return out
}

func (m idmap) gids() []syscall.SysProcIDMap {
	out := []syscall.SysProcIDMap{{ContainerID: m.gid, HostID: m.kgid, Size: 1}}
	if m.dirGID != m.gid && m.kgid != overflowID {
		out = append(out, syscall.SysProcIDMap{ContainerID: m.dirGID, HostID: overflowID, Size: 1})
	}
	return out
}

// holdUserns returns a user namespace describing m. It serves only to
// describe an id mapping, so one namespace serves every mount of the same
// mapping: they are kept (an open descriptor keeps a namespace without any
// process in it), and only a new mapping costs a helper process, which is
// ended as soon as its namespace is open. The caller closes the file it
// gets.
func holdUserns(agent string, m idmap) (*os.File, error) {
	key := m
	usernsMu.Lock()
	defer usernsMu.Unlock()
	f := userns[key]
	if f == nil {
		var err error
		if f, err = newUserns(agent, m); err != nil {
			return nil, err
		}
		if len(userns) >= maxUserns {
			for k, old := range userns {
				old.Close()
				delete(userns, k)
				break
			}
		}
		userns[key] = f
	}
	// A duplicate: the cached one stays open whatever the caller does.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// maxUserns bounds the id-mapping namespaces kept (one per layout owner
// and sandbox user).
const maxUserns = 256

var (
	usernsMu sync.Mutex
	userns   = map[idmap]*os.File{}
)

func newUserns(agent string, m idmap) (*os.File, error) {
	return newMappedUserns(agent, m.uids(), m.gids())
}

// newMappedUserns holds a user namespace of these mappings, for the
// id-mapped mounts it describes: open, it needs no holder.
func newMappedUserns(agent string, uids, gids []syscall.SysProcIDMap) (*os.File, error) {
	pid, release, err := startHolder(agent, uids, gids)
	if err != nil {
		return nil, err
	}
	defer release()
	return os.Open("/proc/" + strconv.Itoa(pid) + "/ns/user")
}

// layoutDir is where AttachLayout puts a sandbox's layout mounts on the
// host, under the sandbox's state directory.
const layoutDir = "layout"

// AttachLayout attaches the id-mapped trees (from IdmappedTrees, in the
// order of mounts) on the host under dir, for a tier whose runtime binds
// host paths rather than taking mount descriptors, and returns the host
// path of each. The mounts stay until DetachLayout; a sandbox directory
// holding them must never be removed before (its removal would descend
// into the caller's directories).
func AttachLayout(dir string, mounts []LayoutMount, trees []*os.File) ([]string, error) {
	if err := os.Mkdir(filepath.Join(dir, layoutDir), 0o700); err != nil {
		return nil, err
	}
	paths := make([]string, len(mounts))
	for i, m := range mounts {
		p := filepath.Join(dir, layoutDir, filepath.Base(m.Target))
		if err := os.Mkdir(p, 0o700); err != nil {
			return nil, err
		}
		if err := unix.MoveMount(int(trees[i].Fd()), "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("%w: attach %s: %v", sandbox.ErrUnavailable, m.Host, err)
		}
		paths[i] = p
	}
	return paths, nil
}

// DetachLayout unmounts what AttachLayout attached under dir and removes
// the mount points. It fails, removing nothing further, if a mount point
// cannot be confirmed empty: rmdir refuses a directory that is still a
// mount point or has contents, so no caller's file can be lost.
func DetachLayout(dir string) error {
	root := filepath.Join(dir, layoutDir)
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount layout %s: %w", p, err)
		}
		if err := unix.Rmdir(p); err != nil {
			return fmt.Errorf("remove layout mount point %s: %w", p, err)
		}
	}
	return unix.Rmdir(root)
}
