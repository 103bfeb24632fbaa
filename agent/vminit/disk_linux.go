package vminit

// The sandbox's writable directories in the guest: tmpfs at boot, and a
// persistent workspace's disk, found by its serial, bound over them once
// the init is configured.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/baseline"
	"golang.org/x/sys/unix"
)

// diskBySerial is the block device whose serial is serial, or "".
func diskBySerial(serial string) string {
	paths, _ := filepath.Glob("/sys/block/vd*/serial")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == serial {
			return "/dev/" + filepath.Base(filepath.Dir(p))
		}
	}
	return ""
}

// guestDev is the guest's own /dev (devtmpfs), which the init keeps
// open as it enters the sandbox's root.
var guestDev *os.File

// diskMount is where the init mounts a persistent workspace's disk:
// in its own mount namespace only (the agent's sees the directories
// bound from it, not the disk).
const diskMount = "/run/.cordon-disk"

// writableSpace mounts the sandbox's writable directories on the new
// root (at), each a tmpfs, nosuid and nodev; each is a shared mount, so
// that a disk bound over it later (attachDisk), once the agent's process
// has its own mount namespace, reaches that namespace too.
func writableSpace(at func(string) string, uid int) error {
	for _, d := range baseline.ScratchDirs {
		if _, err := os.Stat(at(d.Path)); err != nil {
			continue // (an image without /var/tmp)
		}
		data := fmt.Sprintf("mode=%o", d.Mode)
		if d.Owned {
			data += fmt.Sprintf(",uid=%d,gid=%d", uid, uid)
		}
		if err := unix.Mount("tmpfs", at(d.Path), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
			return fmt.Errorf("mount %s: %w", d.Path, err)
		}
		if err := unix.Mount("", at(d.Path), "", unix.MS_SHARED, ""); err != nil {
			return fmt.Errorf("share %s: %w", d.Path, err)
		}
	}
	return nil
}

// attachDisk binds the writable directories from a persistent
// workspace's disk (serial DiskSerial, of size bytes), over their tmpfs:
// each in a directory of its own named as on every tier
// (baseline.ScratchName), made at its first start. The disk is mounted
// nosuid and nodev, and its binds keep those flags. A guest restored
// from a saved one learns its disk's size as the host resizes it, and
// holds what it read of the disk it was saved with: it waits for the
// size, and drops those buffers before it mounts.
func attachDisk(bytes int64, uid int) error {
	var dev string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if dev = diskBySerial(DiskSerial); dev != "" {
			b, _ := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "size"))
			if sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && sectors*512 == bytes {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no disk %s of %d bytes", DiskSerial, bytes)
		}
	}
	// (Through the init's handle on the guest's /dev.)
	dev = fmt.Sprintf("/proc/self/fd/%d/%s", guestDev.Fd(), filepath.Base(dev))
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKFLSBUF, 0)
	f.Close()
	if e != 0 {
		return fmt.Errorf("drop %s's buffers: %w", dev, e)
	}
	if err := os.MkdirAll(diskMount, 0o700); err != nil {
		return err
	}
	if err := unix.Mount(dev, diskMount, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount %s: %w", dev, err)
	}
	for _, d := range baseline.ScratchDirs {
		if _, err := os.Stat(d.Path); err != nil {
			continue
		}
		src := filepath.Join(diskMount, baseline.ScratchName(d.Path))
		if err := os.Mkdir(src, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		// What a workload left there is its own; the directory itself is
		// set as on every start (chmod passes no umask, keeps the sticky
		// bit).
		if err := os.Chmod(src, os.FileMode(d.Mode&0o777)|stickyIf(d.Mode)); err != nil {
			return err
		}
		owner := 0
		if d.Owned {
			owner = uid
		}
		if err := os.Lchown(src, owner, owner); err != nil {
			return err
		}
		if err := unix.Mount(src, d.Path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s from the disk: %w", d.Path, err)
		}
	}
	return nil
}

// stickyIf is os.ModeSticky where mode (a Unix mode) has the sticky bit.
func stickyIf(mode uint32) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}
