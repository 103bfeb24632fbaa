//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"golang.org/x/sys/unix"
)

// MaxRawFileBytes bounds one PUT /files body.
const MaxRawFileBytes = 64 << 30

// handleGetFile serves GET /files?path=P: the file as a raw body (404 when
// it does not exist), or the
// single byte range a Range header names (206). The path jail is the one
// /read-file uses.
func (s *Server) handleGetFile(w httpd.ResponseWriter, r *httpd.Request) {
	// cordon's own route says 404 for a missing file, as the fs-ops
	// routes do (/read-file keeps the reference's 400).
	f, info, ok := openReadable(w, r.URL.Query().Get("path"), s.cfg, fsError)
	if !ok {
		return
	}
	defer f.Close()
	size := info.Size()
	offset, length, status := int64(0), size, httpd.StatusOK
	if rh := r.Header.Get("Range"); rh != "" {
		o, n, ok, sense := parseByteRange(rh, size)
		switch {
		case !sense:
			// Several ranges, or none that parses: the whole file, as
			// RFC 9110 lets a server answer any Range header.
		case !ok:
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			writeJSON(w, httpd.StatusRequestedRangeNotSatisfiable, wire.FileError{Error: "the range " + rh + " is not within the file's " + strconv.FormatInt(size, 10) + " bytes"})
			return
		default:
			offset, length, status = o, n, httpd.StatusPartialContent
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", offset, offset+length-1, size))
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(length, 10))
	w.Header().Set("Accept-Ranges", "bytes")
	w.WriteHeader(status)
	if _, err := io.Copy(w, io.NewSectionReader(f, offset, length)); err != nil {
		panic(httpd.ErrAbortHandler) // a cut-off body must not look whole
	}
}

// parseByteRange reads "bytes=a-b", "bytes=a-" or "bytes=-n" for one
// range: sense is false for a header that is not one such range (several,
// or malformed), which is answered with the whole file; ok is false for
// one that lies outside the file (416).
func parseByteRange(h string, size int64) (offset, length int64, ok, sense bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false, false
	}
	a, b, found := strings.Cut(spec, "-")
	if !found {
		return 0, 0, false, false
	}
	switch {
	case a == "":
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, false, false
		}
		n = min(n, size)
		return size - n, n, n > 0, true
	default:
		start, err := strconv.ParseInt(a, 10, 64)
		if err != nil || start < 0 {
			return 0, 0, false, false
		}
		end := size - 1
		if b != "" {
			if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < start {
				return 0, 0, false, false
			}
			end = min(end, size-1)
		}
		return start, end - start + 1, start < size, true
	}
}

// handlePutFile serves PUT /files?path=P[&mode=OCTAL]: the raw body
// replaces the file atomically, with the permission bits mode gives (never
// a set-id bit) or else the existing file's; an upload cut short leaves
// the previous file intact. The body has a Content-Length, or is chunked
// when its length is not known up front (a stream, a part of a form): its
// end is then the last chunk, and a body that ends without it is an
// upload cut short.
func (s *Server) handlePutFile(w httpd.ResponseWriter, r *httpd.Request) {
	if r.ContentLength > MaxRawFileBytes {
		writeJSON(w, httpd.StatusRequestEntityTooLarge, wire.FileError{Error: fmt.Sprintf("a file may be at most %d bytes", MaxRawFileBytes)})
		return
	}
	path := r.URL.Query().Get("path")
	target, root, err := place(path, s.cfg.Workspace, s.cfg.WriteRoots)
	if err != nil {
		fsError(w, err)
		return
	}
	perm := -1
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o777 {
			writeJSON(w, httpd.StatusBadRequest, wire.FileError{Error: "mode " + m + ": want octal permission bits, 0 to 0777"})
			return
		}
		perm = int(v)
	}
	want := r.ContentLength
	var src io.Reader = &capReader{r: r.Body, left: MaxRawFileBytes}
	if want >= 0 {
		src = io.LimitReader(r.Body, want)
	}
	body := &countReader{r: src}
	n, err := writeFileMode(target, root, body, func() error {
		if want >= 0 && body.n != want {
			return io.ErrUnexpectedEOF
		}
		return nil
	}, perm)
	if err != nil {
		n = body.n
		of := ""
		if want >= 0 {
			of = fmt.Sprintf(" of %d", want)
		}
		switch {
		case errors.Is(err, errTooLarge):
			writeJSON(w, httpd.StatusRequestEntityTooLarge, wire.FileError{Error: fmt.Sprintf("a file may be at most %d bytes; the file was left as it was", MaxRawFileBytes)})
			return
		case errors.Is(err, io.ErrUnexpectedEOF):
			err = fmt.Errorf("the upload ended after %d%s bytes; the file was left as it was", n, of)
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			// Not the temporary file's name, which the caller never gave.
			err = fmt.Errorf("writing %s: %w after %d%s bytes: %s; the file was left as it was", path, unix.ENOSPC, n, of, whatIsFull(root))
		}
		fsError(w, err)
		return
	}
	writeJSON(w, httpd.StatusOK, wire.WriteFileResponse{OK: true, BytesWritten: int(n), Path: target})
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// whatIsFull says which of the writable space's bounds under root a write
// met: its bytes, or its count of files (one a 4 KiB page of its size).
func whatIsFull(root string) string {
	var st unix.Statfs_t
	if unix.Statfs(root, &st) == nil && st.Files > 0 && st.Ffree == 0 {
		return fmt.Sprintf("the sandbox's writable space holds all the files it may (%d, one for each 4 KiB of its disk limit)", st.Files)
	}
	return "the sandbox's writable space is full (its disk limit)"
}
