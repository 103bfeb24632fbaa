package host

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/disk"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// DiskDir is a directory MountDisk keeps at the top of a disk.
type DiskDir struct {
	Name     string
	Mode     uint32 // permission bits, the sticky bit among them
	UID, GID int    // the sandbox's ids
}

// MountDisk mounts a sandbox's disk image (sandbox.Launch.Disk) on dir
// for an instance whose ids 0 to size-1 are the host's uidBase and
// gidBase on: the file system holds the sandbox's own ids, and the mount
// maps them (an id-mapped mount, made in a namespace agent holds), so
// that the disk keeps its owners whichever host ids a later instance
// gets. With no agent the disk is mounted as it is (mountPlain). The file
// system's root is the sandbox's root's, mode 0700, and holds dirs, each
// with its mode and owner whatever an earlier instance left; the mount is
// nosuid and nodev. UnmountDisk lets it go.
func MountDisk(agent, image, dir string, uidBase, gidBase, size int, dirs []DiskDir) error {
	if err := os.Mkdir(filepath.Dir(dir), 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if agent == "" {
		return mountPlain(image, dir, uidBase, gidBase, dirs)
	}
	raw := dir + ".raw"
	if err := disk.Mount(context.Background(), image, raw); err != nil {
		return fmt.Errorf("%w: the sandbox's disk: %v", sandbox.ErrUnavailable, err)
	}
	// The raw mount goes whatever happens: the id-mapped one, if made,
	// holds the file system.
	defer func() {
		_ = unix.Unmount(raw, unix.UMOUNT_NOFOLLOW)
		_ = os.Remove(raw)
	}()
	if err := keepDirs(raw, 0, 0, dirs); err != nil {
		return err
	}
	ns, err := newMappedUserns(agent,
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: uidBase, Size: size}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: gidBase, Size: size}})
	if err != nil {
		return err
	}
	defer ns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, raw, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("%w: the sandbox's disk: clone its mount: %v", sandbox.ErrUnavailable, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("%w: the sandbox's disk: id-mapped mount: %v", sandbox.ErrUnavailable, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(dir)
		return fmt.Errorf("%w: the sandbox's disk: attach: %v", sandbox.ErrUnavailable, err)
	}
	return nil
}

// mountPlain mounts the disk on dir as it is, its ids the host's from
// uidBase and gidBase on, for a runtime that writes through the mount
// with ids of its own (gVisor's gofer), which an id-mapped mount does not
// map. The sandbox must then get the same ids at every start
// (DiskIDBase).
func mountPlain(image, dir string, uidBase, gidBase int, dirs []DiskDir) error {
	if err := disk.Mount(context.Background(), image, dir); err != nil {
		return fmt.Errorf("%w: the sandbox's disk: %v", sandbox.ErrUnavailable, err)
	}
	if err := keepDirs(dir, uidBase, gidBase, dirs); err != nil {
		_ = UnmountDisk(dir)
		return err
	}
	return nil
}

// DiskIDBase is the first host id of a sandbox on the disk image whose
// ids are the host's (mountPlain): the same for the image at every start,
// in IDRange's range.
func DiskIDBase(image string) int {
	sum := sha256.Sum256([]byte(image))
	return 1<<30 + int(binary.BigEndian.Uint32(sum[:4])%(1<<14))<<16
}

// keepDirs gives the disk's root, on the host at root, to the sandbox's
// root (host ids uid and gid), mode 0700, and keeps dirs there, their
// owners offset by uid and gid. Nothing of the sandbox runs, and the
// names are the host's: no link of the sandbox's is followed.
func keepDirs(root string, uid, gid int, dirs []DiskDir) error {
	if err := os.Chown(root, uid, gid); err != nil {
		return err
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return err
	}
	for _, d := range dirs {
		p := filepath.Join(root, d.Name)
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if st, err := os.Lstat(p); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: the sandbox's disk: %s is not a directory", sandbox.ErrUnavailable, d.Name)
		}
		if err := os.Lchown(p, uid+d.UID, gid+d.GID); err != nil {
			return err
		}
		if err := unix.Chmod(p, d.Mode); err != nil {
			return err
		}
	}
	return nil
}

// UnmountDisk unmounts a disk MountDisk mounted on dir, removes dir, and
// returns once the image is free to be mounted again.
func UnmountDisk(dir string) error {
	if err := disk.Unmount(dir); err != nil {
		return err
	}
	_ = os.Remove(filepath.Dir(dir)) // the last one's
	return nil
}

// disksDir holds, under a tier's state directory, the mount points of
// its sandboxes' disks: apart from the sandboxes' own directories, which
// a sweep removes whole and must never reach into a disk through.
const disksDir = "disks"

// DiskMountPoint is where sandbox id's disk is mounted under stateDir
// (MountDisk makes its parent, traversable by a sandbox's init, and
// UnmountDisk removes that once it is empty).
func DiskMountPoint(stateDir, id string) string {
	return filepath.Join(stateDir, disksDir, id)
}

// SweepDisks unmounts the disks under stateDir whose sandbox live does
// not name (a sandbox gone with its host's processes, or torn down
// before it could let go of its disk). Nothing on a disk is removed.
func SweepDisks(stateDir string, live func(id string) bool) error {
	ents, err := os.ReadDir(filepath.Join(stateDir, disksDir))
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range ents {
		if live(e.Name()) {
			continue
		}
		errs = append(errs, UnmountDisk(filepath.Join(stateDir, disksDir, e.Name())))
	}
	return errors.Join(errs...)
}
