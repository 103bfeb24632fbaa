package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/printable"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

func cpCmd(args []string) int {
	fs := newFlagSet("cp", "usage: cordon cp [flags] SRC DST\n\nCopies a file or a directory into or out of a sandbox; the sandbox side is\nID:PATH (a relative PATH is under /workspace), the other a local path or -\nfor standard input or output (a directory copied out to - is a tar\nstream; --tar unpacks one from standard input into the sandbox). Files\nstream in constant memory, with a progress bar on a terminal; each file is\nreplaced atomically. Directories and regular files are copied, with their\npermission bits and never a set-id bit; symbolic links and special files\nare skipped, and said so.")
	asTar := fs.Bool("tar", false, "SRC is - and a tar stream, unpacked into the sandbox directory DST")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) != 2 {
		fs.Usage()
		return 2
	}
	src, dst := rest[0], rest[1]
	sid, spath, fromSandbox := sandboxPath(src)
	did, dpath, toSandbox := sandboxPath(dst)
	ctx := context.Background()
	switch {
	case fromSandbox == toSandbox:
		fmt.Fprintln(os.Stderr, "cordon: cp copies between a sandbox (ID:PATH) and a local path")
		return 2
	case toSandbox && *asTar:
		if src != "-" {
			fmt.Fprintln(os.Stderr, "cordon: cp --tar reads the tar stream from standard input: SRC is -")
			return 2
		}
		if err := uploadTar(ctx, c, did, os.Stdin, dpath); err != nil {
			return apiFail(err)
		}
	case toSandbox:
		if st, err := os.Stat(src); src != "-" && err == nil && st.IsDir() {
			// Into an existing directory, as its child of the same name.
			if fi, err := c.Stat(ctx, did, dpath); err == nil && fi.Type == "dir" {
				dpath = path.Join(dpath, filepath.Base(src))
			}
			if err := uploadTree(ctx, c, did, src, dpath); err != nil {
				return apiFail(err)
			}
			return 0
		}
		var r io.Reader = os.Stdin
		size := int64(-1)
		if src != "-" {
			f, err := os.Open(src)
			if err != nil {
				return apiFail(err)
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return apiFail(err)
			}
			r, size = f, st.Size()
		} else if sb, err := c.Get(ctx, did); err == nil && slices.Contains(sb.Features, "files-chunked") {
			// Streamed as it comes, its length unknown until it ends.
		} else {
			// This sandbox's agent needs the length up front: standard
			// input is spooled first.
			tmp, err := os.CreateTemp("", "cordon-cp-*")
			if err != nil {
				return apiFail(err)
			}
			defer os.Remove(tmp.Name())
			defer tmp.Close()
			if size, err = io.Copy(tmp, os.Stdin); err != nil {
				return apiFail(err)
			}
			if _, err := tmp.Seek(0, 0); err != nil {
				return apiFail(err)
			}
			r = tmp
		}
		pb := newProgress(dst, size)
		err := c.Upload(ctx, did, dpath, pb.reader(r), size)
		pb.done(err)
		if err != nil {
			return apiFail(err)
		}
	default:
		var size int64 = -1
		fi, err := c.Stat(ctx, sid, spath)
		if err == nil {
			size = fi.Size
		}
		if err == nil && fi.Type == "dir" {
			switch {
			case dst == "-" && isTerminal(os.Stdout):
				// A tar on a terminal is noise, with the sandbox's bytes
				// (escape sequences among them) in it.
				fmt.Fprintln(os.Stderr, "cordon cp: "+printable.String(src)+" is a directory, which goes to - as a tar, and standard output is a terminal: send it to a file or a pipe (| tar -x), or copy it to a local directory")
				return 2
			case dst == "-":
				err = downloadTar(ctx, c, sid, spath, os.Stdout)
			default:
				if st, serr := os.Stat(dst); serr == nil && st.IsDir() {
					dst = filepath.Join(dst, path.Base(spath))
				}
				err = downloadTree(ctx, c, sid, spath, dst)
			}
			if err != nil {
				return apiFail(err)
			}
			return 0
		}
		pb := newProgress(src, size)
		if dst == "-" {
			_, err = c.Download(ctx, sid, spath, 0, 0, pb.writer(os.Stdout))
		} else {
			err = downloadAtomically(ctx, c, sid, spath, dst, pb)
		}
		pb.done(err)
		if err != nil {
			return apiFail(err)
		}
	}
	return 0
}

// sandboxPath splits ID:PATH; a local path has no colon before its first
// slash.
func sandboxPath(s string) (id, path string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// downloadAtomically writes to a temporary sibling and renames it over dst
// only once the whole file arrived, so a broken transfer leaves dst as it
// was.
func downloadAtomically(ctx context.Context, c *sclient.Client, id, path, dst string, pb *progress) error {
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, filepath.Base(path))
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".cordon-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := c.Download(ctx, id, path, 0, 0, pb.writer(tmp)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// progress draws a progress bar on standard error when it is a terminal
// and the file is large enough to wait for; otherwise it stays silent.
type progress struct {
	name       string
	size, n    int64
	start      time.Time
	last       time.Time
	tty, shown bool
}

func newProgress(name string, size int64) *progress {
	// A name from the sandbox is the sandbox's choice: shown escaped.
	return &progress{name: printable.String(name), size: size, start: time.Now(), tty: isTerminal(os.Stderr) && (size < 0 || size >= 1<<20)}
}

func (p *progress) add(n int) {
	p.n += int64(n)
	if !p.tty || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.shown = time.Now(), true
	rate := float64(p.n) / max(time.Since(p.start).Seconds(), 1e-3)
	if p.size > 0 {
		width := 30
		fill := int(float64(width) * float64(p.n) / float64(p.size))
		fmt.Fprintf(os.Stderr, "\r%s [%s%s] %s / %s  %s/s ", p.name, strings.Repeat("=", fill), strings.Repeat(" ", max(width-fill, 0)), humanSize(p.n), humanSize(p.size), humanSize(int64(rate)))
	} else {
		fmt.Fprintf(os.Stderr, "\r%s %s  %s/s ", p.name, humanSize(p.n), humanSize(int64(rate)))
	}
}

func (p *progress) done(err error) {
	if p.shown {
		p.last = time.Time{}
		p.add(0)
		fmt.Fprintln(os.Stderr)
	}
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(n)
	return n, err
}

type progressWriter struct {
	w io.Writer
	p *progress
}

func (w progressWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.p.add(n)
	return n, err
}

func (p *progress) reader(r io.Reader) io.Reader { return progressReader{r, p} }
func (p *progress) writer(w io.Writer) io.Writer { return progressWriter{w, p} }
