package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/mounted"
	"golang.org/x/sys/unix"
)

// Available says why this host cannot keep disks, or nil: it takes root
// (a loop device and an ext4 mount) and e2fsprogs' mkfs.ext4.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("persistent disks need root (a loop-mounted ext4 image)")
	}
	if _, err := mkfs(); err != nil {
		return err
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no loop devices: %w", err)
	}
	return nil
}

func mkfs() (string, error) {
	for _, p := range []string{"mkfs.ext4", "/sbin/mkfs.ext4", "/usr/sbin/mkfs.ext4"} {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	return "", errors.New("mkfs.ext4 is not installed (Debian: apt-get install e2fsprogs)")
}

// Create makes a sparse image of size bytes at path holding an empty ext4
// file system (no blocks reserved for root: the quota is all the
// sandbox's), or fails leaving nothing. An existing path is an error.
func Create(ctx context.Context, path string, size int64) error {
	if size < MinBytes {
		return fmt.Errorf("a disk of %d bytes: the least is %d", size, MinBytes)
	}
	bin, err := mkfs()
	if err != nil {
		return err
	}
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var out []byte
		out, err = exec.CommandContext(ctx, bin, "-q", "-F", "-m", "0", "-L", "cordon",
			"-E", "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", tmp).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		if _, serr := os.Stat(path); serr == nil {
			err = fmt.Errorf("%s exists", path)
		} else {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Mount mounts image on dir (made if missing), nosuid and nodev, its loop
// device let go when the last mount of it goes. An image that a loop
// device still holds is refused with ErrInUse rather than mounted twice.
func Mount(ctx context.Context, image, dir string) error {
	image, err := filepath.Abs(image)
	if err != nil {
		return err
	}
	if inUse(image) {
		return fmt.Errorf("%w: %s", ErrInUse, image)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", image, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount %s: %v: %s", image, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Unmount unmounts dir and removes it, and returns once the image's loop
// device is let go. A dir that is no mount point is only removed (if
// empty: nothing below a mount point is ever removed here).
func Unmount(dir string) error {
	image := backing(dir)
	for i := 0; ; i++ {
		err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if !errors.Is(err, unix.EBUSY) || i == 50 {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// The loop device is let go asynchronously once the file system is.
	for i := 0; image != "" && inUse(image); i++ {
		if i == 100 {
			return fmt.Errorf("%w: %s after unmounting %s", ErrInUse, image, dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// backing is the image file mounted on dir through a loop device, or "".
func backing(dir string) string {
	for _, m := range loopMounts() {
		if m.dir == dir {
			return m.image
		}
	}
	return ""
}

// Capacity is the size, in bytes, of the file system dir is on.
func Capacity(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks) * st.Bsize, nil
}

// Mounted reports whether image's file system is mounted on this host
// (where Freeze can freeze it).
func Mounted(image string) bool {
	abs, err := filepath.Abs(image)
	return err == nil && mountOf(abs) != ""
}

// mountOf is a mount point of image's file system, or "".
func mountOf(image string) string {
	for _, m := range loopMounts() {
		if m.image == image {
			return m.dir
		}
	}
	return ""
}

// loopMount is a mount of an image through a loop device.
type loopMount struct{ dir, image string }

// loopMounts lists this mount namespace's mounts of loop devices, with
// their image files.
func loopMounts() []loopMount {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []loopMount
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint opts ... - fstype source superopts
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+2 < len(f) && len(f) > 4 && strings.HasPrefix(f[i+2], "/dev/loop") {
				if b, err := os.ReadFile("/sys/block/" + strings.TrimPrefix(f[i+2], "/dev/") + "/loop/backing_file"); err == nil {
					out = append(out, loopMount{dir: mounted.Unescape(f[4]), image: strings.TrimSpace(string(b))})
				}
			}
		}
	}
	return out
}

// inUse reports whether a loop device holds image.
func inUse(image string) bool {
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, d := range devs {
		if b, err := os.ReadFile(d); err == nil && strings.TrimSpace(string(b)) == image {
			return true
		}
	}
	return false
}

// ErrNoReflinks: the images' file system cannot share extents between
// files (ext4), so a disk cannot be copied in constant time.
var ErrNoReflinks = errors.New("the disks' file system has no reflinks (XFS and btrfs have)")

// Clone makes dst a copy-on-write copy of image src (FICLONE): a copy in
// time independent of its size, sharing its blocks until either writes.
// It fails with ErrNoReflinks where the file system cannot.
func Clone(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
			return fmt.Errorf("%w: %v", ErrNoReflinks, err)
		}
		return err
	}
	return nil
}

// Reflinks reports whether dir's file system can Clone.
func Reflinks(dir string) bool {
	f, err := os.CreateTemp(dir, ".reflink-")
	if err != nil {
		return false
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	err = Clone(name, name+".2")
	os.Remove(name + ".2")
	return err == nil
}

// fiFreeze and fiThaw are FIFREEZE and FITHAW (_IOWR('X', 119/120, int)).
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// Freeze freezes the file system image holds while it is mounted (every
// write to it waits; what it holds on the image is consistent), and
// returns the thaw. An image that is not mounted needs none.
func Freeze(image string) (thaw func() error, err error) {
	image, err = filepath.Abs(image)
	if err != nil {
		return nil, err
	}
	mnt := mountOf(image)
	if mnt == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Open(mnt)
	if err != nil {
		return nil, err
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fiFreeze, 0); e != 0 {
		f.Close()
		return nil, fmt.Errorf("freeze %s: %w", mnt, e)
	}
	return func() error {
		defer f.Close()
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fiThaw, 0); e != 0 {
			return fmt.Errorf("thaw %s: %w", mnt, e)
		}
		return nil
	}, nil
}
