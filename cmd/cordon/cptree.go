package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/printable"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// Directories copy whole, both ways, as docker cp copies them: a tree of
// directories and regular files (symbolic links and special files are
// skipped, and said so), with each file's permission bits but never a
// set-id bit, which no copy brings onto the host or into a sandbox. A
// directory copied out to "-" is a tar stream; cp --tar - ID:DIR unpacks
// one into the sandbox.

// copyMode is the mode a copied file gets: its permission bits, no set-id
// or sticky bit.
func copyMode(mode uint32) os.FileMode { return os.FileMode(mode) & os.ModePerm }

// uploadTree copies the local directory src into the sandbox at dst (a
// directory made with its parents).
func uploadTree(ctx context.Context, c *sclient.Client, id, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			return c.Mkdir(ctx, id, target)
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			return c.UploadMode(ctx, id, target, f, st.Size(), int(copyMode(uint32(st.Mode().Perm()))))
		}
		fmt.Fprintf(os.Stderr, "cordon: skipped %s (%v): only directories and regular files are copied\n", printable.String(p), d.Type())
		return nil
	})
}

// walkSandbox calls fn for every entry under the sandbox directory root
// (parents before their children), with its path relative to root.
func walkSandbox(ctx context.Context, c *sclient.Client, id, root string, fn func(rel string, size int64, mode uint32, dir bool) error) error {
	var walk func(rel string) error
	walk = func(rel string) error {
		l, err := c.ListDir(ctx, id, path.Join(root, rel))
		if err != nil {
			return err
		}
		if l.Truncated {
			return fmt.Errorf("%s has more entries than one listing holds", path.Join(root, rel))
		}
		for _, e := range l.Entries {
			// The listing is the sandbox's word: a name that no directory
			// holds would lead the copy out of its destination on the host.
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
				return fmt.Errorf("the sandbox listed %s with an entry named %s, which no directory can hold", path.Join(root, rel), printable.String(strconv.Quote(e.Name)))
			}
			r := path.Join(rel, e.Name)
			switch e.Type {
			case "dir":
				if err := fn(r, 0, e.Mode, true); err != nil {
					return err
				}
				if err := walk(r); err != nil {
					return err
				}
			case "file":
				if err := fn(r, e.Size, e.Mode, false); err != nil {
					return err
				}
			default:
				fmt.Fprintf(os.Stderr, "cordon: skipped %s (%s): only directories and regular files are copied\n", printable.String(path.Join(root, r)), printable.String(e.Type))
			}
		}
		return nil
	}
	return walk("")
}

// downloadTree copies the sandbox directory src to the local directory dst
// (made, with its parents).
func downloadTree(ctx context.Context, c *sclient.Client, id, src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return walkSandbox(ctx, c, id, src, func(rel string, size int64, mode uint32, dir bool) error {
		local := filepath.Join(dst, filepath.FromSlash(rel))
		if dir {
			if err := os.Mkdir(local, copyMode(mode)|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return nil
		}
		pb := newProgress(path.Join(src, rel), size)
		err := downloadAtomically(ctx, c, id, path.Join(src, rel), local, pb)
		pb.done(err)
		if err != nil {
			return err
		}
		return os.Chmod(local, copyMode(mode))
	})
}

// downloadTar writes the sandbox directory src to w as a tar stream.
func downloadTar(ctx context.Context, c *sclient.Client, id, src string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := walkSandbox(ctx, c, id, src, func(rel string, size int64, mode uint32, dir bool) error {
		h := &tar.Header{Name: rel, Mode: int64(copyMode(mode)), ModTime: time.Now(), Typeflag: tar.TypeReg, Size: size}
		if dir {
			h.Name, h.Typeflag, h.Size = rel+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil || dir {
			return err
		}
		// The file may have changed since it was listed: exactly size
		// bytes go in, or the copy fails.
		n, err := c.Download(ctx, id, path.Join(src, rel), 0, size, tw)
		if err == nil && n != size {
			err = fmt.Errorf("%s changed while it was copied", path.Join(src, rel))
		}
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// uploadTar unpacks the tar stream r into the sandbox directory dst:
// directories and regular files only, every name kept under dst.
func uploadTar(ctx context.Context, c *sclient.Client, id string, r io.Reader, dst string) error {
	if err := c.Mkdir(ctx, id, dst); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + h.Name)[1:]
		if name == "" || strings.HasPrefix(h.Name, "/") || strings.Contains("/"+h.Name+"/", "/../") {
			if name == "" {
				continue
			}
			return fmt.Errorf("the archive names %q, which would leave the destination", h.Name)
		}
		target := path.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = c.Mkdir(ctx, id, target)
		case tar.TypeReg:
			if err = c.Mkdir(ctx, id, path.Dir(target)); err == nil {
				err = c.UploadMode(ctx, id, target, tr, h.Size, int(copyMode(uint32(h.Mode))))
			}
		default:
			fmt.Fprintf(os.Stderr, "cordon: skipped %s: only directories and regular files are copied\n", printable.String(h.Name))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}
