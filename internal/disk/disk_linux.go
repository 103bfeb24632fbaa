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
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint opts ... - fstype source superopts
		f := strings.Fields(line)
		if len(f) < 5 || unescape(f[4]) != dir {
			continue
		}
		for i, x := range f {
			if x == "-" && i+2 < len(f) && strings.HasPrefix(f[i+2], "/dev/loop") {
				if b, err := os.ReadFile("/sys/block/" + strings.TrimPrefix(f[i+2], "/dev/") + "/loop/backing_file"); err == nil {
					return strings.TrimSpace(string(b))
				}
			}
		}
	}
	return ""
}

// unescape undoes mountinfo's octal escapes (space, tab, newline, \).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
