package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/disk"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// MountDisk mounts a sandbox's disk image (sandbox.Launch.Disk) on dir
// for an instance whose ids 0 to size-1 are the host's uidBase and
// gidBase on: the file system holds the sandbox's own ids, and the mount
// maps them (an id-mapped mount), so that the disk keeps its owners
// whichever host ids a later instance gets. The file system's root is the
// sandbox's root's, mode 0700; the mount is nosuid and nodev. UnmountDisk
// lets it go.
func MountDisk(agent, image, dir string, uidBase, gidBase, size int) error {
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
	if err := os.Chown(raw, 0, 0); err != nil {
		return err
	}
	if err := os.Chmod(raw, 0o700); err != nil {
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

// UnmountDisk unmounts a disk MountDisk mounted on dir, removes dir, and
// returns once the image is free to be mounted again.
func UnmountDisk(dir string) error { return disk.Unmount(dir) }
