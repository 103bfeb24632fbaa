package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// unpacker applies layers, in order, to one root directory. Every path is
// resolved by the kernel inside the root (openat2 RESOLVE_IN_ROOT), so no
// entry, symlinked parent or hardlink can reach outside it.
type unpacker struct {
	root    int // O_PATH descriptor of the root directory
	limits  Limits
	bytes   int64
	entries int
}

func newUnpacker(dir string, limits Limits) (*unpacker, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &unpacker{root: fd, limits: limits}, nil
}

func (u *unpacker) close() { unix.Close(u.root) }

func (u *unpacker) openIn(rel string, flags int) (int, error) {
	if rel == "" || rel == "." {
		return unix.Openat(u.root, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	return unix.Openat2(u.root, rel, &how)
}

// dirIn opens (creating as needed) directory rel inside the root. Each
// prefix is resolved from the root with RESOLVE_IN_ROOT, so symlinks in the
// image resolve as they would inside it (absolute ones from its root) and
// never outside.
func (u *unpacker) dirIn(rel string) (int, error) {
	fd, err := u.openIn(".", 0)
	if err != nil {
		return -1, err
	}
	prefix := ""
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		prefix = path.Join(prefix, c)
		next, err := u.openIn(prefix, unix.O_PATH|unix.O_DIRECTORY)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			// Missing, or a non-directory (a dangling link or a file that
			// a later layer turns into a directory): make it a directory.
			if errors.Is(err, unix.ENOTDIR) {
				_ = unix.Unlinkat(fd, c, 0)
			}
			if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, err
			}
			next, err = u.openIn(prefix, unix.O_PATH|unix.O_DIRECTORY)
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// removeAll removes name inside dirfd, recursively, without following links.
func removeAll(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(sub), name)
	names, _ := f.Readdirnames(-1)
	for _, n := range names {
		if err := removeAll(sub, n); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// apply unpacks one layer's tar stream.
func (u *unpacker) apply(r io.Reader) error {
	tr := tar.NewReader(r)
	created := map[string]bool{} // paths this layer made, spared by its own opaque markers
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if u.entries++; u.entries > u.limits.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrHostileLayer, u.limits.MaxEntries)
		}
		rel := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if rel == "" {
			continue
		}
		dir, base := path.Split(rel)
		dir = strings.TrimSuffix(dir, "/")
		if err := u.entry(hdr, tr, rel, dir, base, created); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
}

func (u *unpacker) entry(hdr *tar.Header, tr *tar.Reader, rel, dir, base string, created map[string]bool) error {
	parent, err := u.dirIn(dir)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if strings.HasPrefix(base, ".wh.") {
		if base == ".wh..wh..opq" {
			// Opaque: what lower layers put in this directory goes.
			rd, err := unix.Openat(parent, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			df := os.NewFile(uintptr(rd), dir)
			names, _ := df.Readdirnames(-1)
			df.Close()
			for _, n := range names {
				if !created[path.Join(dir, n)] {
					if err := removeAll(parent, n); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return removeAll(parent, strings.TrimPrefix(base, ".wh."))
	}
	created[rel] = true
	// No set-id bit reaches the cache: on the host, under directories
	// anyone may pass, a set-user-ID-root program an image brought would
	// be a way to root for every local user; in a sandbox, where no
	// program gains privileges, the bit does nothing.
	mode := uint32(hdr.Mode & 0o7777 &^ (unix.S_ISUID | unix.S_ISGID))
	// Whatever stands at the name is replaced, except a directory by a
	// directory (its contents stay; its metadata is updated).
	var st unix.Stat_t
	exists := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	if exists && !(hdr.Typeflag == tar.TypeDir && st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		if err := removeAll(parent, base); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(parent, base, mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		if err := unix.Fchmodat(parent, base, mode, 0); err != nil {
			return err
		}
	case tar.TypeReg, tar.TypeRegA:
		if u.bytes += hdr.Size; u.bytes > u.limits.MaxBytes {
			return fmt.Errorf("%w: more than %d bytes unpacked", ErrHostileLayer, u.limits.MaxBytes)
		}
		fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), base)
		n, err := io.Copy(f, io.LimitReader(tr, hdr.Size))
		if err == nil && n != hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = f.Chmod(os.FileMode(mode&0o777) | modeBits(mode))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		// Kept as written: inside the sandbox it resolves in the image's
		// own tree, and the unpacker never follows it outside the root.
		if err := unix.Symlinkat(hdr.Linkname, parent, base); err != nil {
			return err
		}
	case tar.TypeLink:
		target := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
		tdir, tbase := path.Split(target)
		tparent, err := u.openIn(strings.TrimSuffix(tdir, "/"), unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("%w: hard link to %q, which is not in the image", ErrHostileLayer, hdr.Linkname)
		}
		err = unix.Linkat(tparent, tbase, parent, base, 0)
		unix.Close(tparent)
		if err != nil {
			return fmt.Errorf("%w: hard link to %q: %v", ErrHostileLayer, hdr.Linkname, err)
		}
		return nil // a link shares its target's owner and mode
	case tar.TypeChar, tar.TypeBlock:
		// Never made: on the host an image's device node (a disk's, the
		// kernel's memory's, with the mode it names) would open that
		// device for any local user who reaches it. A sandbox's /dev is
		// its own.
		return nil
	case tar.TypeFifo:
		if err := unix.Mkfifoat(parent, base, mode); err != nil {
			return err
		}
	default:
		return nil // extended headers and the like carry nothing to create
	}
	// Every entry belongs to whoever unpacks (root, for a daemon's cache),
	// not to the owner the image names: on the host a local user whose
	// uid an image names (1000 is common) could otherwise change what
	// every sandbox of the image reads. In a sandbox those owners meant
	// nothing anyway: host ids outside its range show as nobody.
	return nil
}

func modeBits(m uint32) os.FileMode {
	var out os.FileMode
	if m&unix.S_ISUID != 0 {
		out |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		out |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		out |= os.ModeSticky
	}
	return out
}
