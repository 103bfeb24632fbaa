//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

func fileError(w httpd.ResponseWriter, err error) {
	writeJSON(w, httpd.StatusBadRequest, wire.FileError{OK: false, Error: err.Error()})
}

func (s *Server) handleReadFile(w httpd.ResponseWriter, r *httpd.Request) {
	var body struct {
		Path             json.RawMessage `json:"path"`
		Encoding         json.RawMessage `json:"encoding"`
		Range            json.RawMessage `json:"range"`
		CapabilitiesOnly json.RawMessage `json:"capabilitiesOnly"`
	}
	if err := s.readBody(r, &body); err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
		return
	}
	if string(body.CapabilitiesOnly) == "true" {
		var c wire.ReadCapabilities
		c.OK = true
		c.ReadFileRanges.Version = 1
		c.ReadFileRanges.MaxBytes = wire.FileRangeMaxBytes
		writeJSON(w, httpd.StatusOK, c)
		return
	}
	if !truthy(body.Path) {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeMissingPath})
		return
	}
	p, ok := rawString(body.Path)
	if !ok {
		fileError(w, errors.New("path must be a string"))
		return
	}
	encoding := "utf8"
	if e, _ := rawString(body.Encoding); e == "base64" {
		encoding = "base64"
	}
	f, info, ok := openReadable(w, p, s.cfg, fileError)
	if !ok {
		return
	}
	defer f.Close()
	var src io.Reader = f
	var rng *wire.Range
	if len(body.Range) > 0 {
		offset, length, err := parseRange(body.Range)
		if err != nil {
			fileError(w, err)
			return
		}
		want := max(0, info.Size()-offset)
		if length != nil {
			want = *length
		}
		if want > wire.FileRangeMaxBytes {
			fileError(w, errors.New("file read range exceeds the agent limit; specify a bounded length"))
			return
		}
		src = io.NewSectionReader(f, offset, want)
		rng = &wire.Range{Version: 1, Offset: offset, Length: length}
	}
	streamFileJSON(w, src, encoding, rng)
}

// openReadable opens path under the read roots and stats it; a refusal has
// been answered (by refuse) when ok is false.
func openReadable(w httpd.ResponseWriter, path string, cfg Config, refuse func(httpd.ResponseWriter, error)) (*os.File, os.FileInfo, bool) {
	target, root, err := place(path, cfg.Workspace, cfg.ReadRoots)
	if err == nil {
		var f *os.File
		if f, err = openForRead(target, root); err == nil {
			info, err := f.Stat()
			if err == nil {
				return f, info, true
			}
			f.Close()
		}
	}
	refuse(w, err)
	return nil, nil, false
}

// parseRange validates a range object: version exactly 1, offset and length
// whole non-negative numbers, length at most FileRangeMaxBytes.
func parseRange(raw json.RawMessage) (offset int64, length *int64, err error) {
	bad := errors.New("invalid or oversized file read range")
	var m map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		return 0, nil, bad
	}
	var v float64
	if json.Unmarshal(m["version"], &v) != nil || v != 1 {
		return 0, nil, bad
	}
	num := func(key string, limit float64) (*int64, bool) {
		raw, ok := m[key]
		if !ok {
			return nil, true
		}
		if string(raw) == "null" {
			return nil, false
		}
		var n float64
		if json.Unmarshal(raw, &n) != nil || n < 0 || n != math.Trunc(n) || n > limit {
			return nil, false
		}
		i := int64(n)
		return &i, true
	}
	off, ok1 := num("offset", 1<<53-1)
	length, ok2 := num("length", wire.FileRangeMaxBytes)
	if !ok1 || !ok2 {
		return 0, nil, bad
	}
	if off != nil {
		offset = *off
	}
	return offset, length, nil
}

// streamFileJSON writes {"ok":true,"content":...,"sizeBytes":N,"encoding":E}
// while reading, so a large file costs constant memory. The first read
// happens before the status is committed; a later failure aborts the
// connection, so a caller never mistakes a cut-off reply for a whole file.
func streamFileJSON(w httpd.ResponseWriter, src io.Reader, encoding string, rng *wire.Range) {
	buf := make([]byte, 256<<10)
	n, err := io.ReadFull(src, buf)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		fileError(w, err)
		return
	}
	more := err == nil
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(httpd.StatusOK)
	bw := bufio.NewWriterSize(w, 256<<10)
	defer bw.Flush()
	_, _ = io.WriteString(bw, `{"ok":true,"content":"`)
	var total int64
	var enc io.WriteCloser
	var text jsonStringWriter
	if encoding == "base64" {
		enc = base64.NewEncoder(base64.StdEncoding, bw)
	} else {
		text.w = bw
	}
	put := func(b []byte) {
		total += int64(len(b))
		if enc != nil {
			_, _ = enc.Write(b)
		} else {
			text.write(b)
		}
	}
	put(buf[:n])
	for more {
		n, err = io.ReadFull(src, buf)
		put(buf[:n])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			panic(httpd.ErrAbortHandler)
		}
	}
	if enc != nil {
		_ = enc.Close()
	} else {
		text.flush()
	}
	tail := `","sizeBytes":` + strconv.FormatInt(total, 10) + `,"encoding":"` + encoding + `"`
	if rng != nil {
		r, _ := json.Marshal(rng)
		tail += `,"range":` + string(r)
	}
	_, _ = io.WriteString(bw, tail+"}")
}

// jsonStringWriter writes bytes as the inside of a JSON string, decoding
// UTF-8 across chunk boundaries and replacing invalid bytes with U+FFFD.
type jsonStringWriter struct {
	w     io.Writer
	carry []byte
	out   []byte
}

func (j *jsonStringWriter) write(b []byte) {
	if len(j.carry) > 0 {
		b = append(j.carry, b...)
		j.carry = nil
	}
	cut := wire.CompleteUTF8(b)
	j.carry = append(j.carry, b[cut:]...)
	j.emit(b[:cut])
}

func (j *jsonStringWriter) flush() {
	j.emit(j.carry)
	j.carry = nil
}

func (j *jsonStringWriter) emit(b []byte) {
	out := j.out[:0]
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		switch {
		case r == '"':
			out = append(out, '\\', '"')
		case r == '\\':
			out = append(out, '\\', '\\')
		case r == '\n':
			out = append(out, '\\', 'n')
		case r == '\r':
			out = append(out, '\\', 'r')
		case r == '\t':
			out = append(out, '\\', 't')
		case r < 0x20, r == 0x2028, r == 0x2029:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = utf8.AppendRune(out, r)
		}
	}
	j.out = out
	_, _ = j.w.Write(out)
}

func (s *Server) handleWriteFile(w httpd.ResponseWriter, r *httpd.Request) {
	if r.ContentLength < 0 || r.ContentLength > streamThreshold {
		s.writeFileStreaming(w, r)
		return
	}
	var body writeBody
	if err := s.readBody(r, &body); err != nil {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
		return
	}
	s.writeBuffered(w, body)
}

// writeBody is /write-file's body, each field raw.
type writeBody struct {
	Path     json.RawMessage `json:"path"`
	Content  json.RawMessage `json:"content"`
	Encoding json.RawMessage `json:"encoding"`
}

// writeTarget validates the path and places it under a write root; a
// refusal has been answered when ok is false.
func (s *Server) writeTarget(w httpd.ResponseWriter, body writeBody) (target, root string, ok bool) {
	if !truthy(body.Path) || len(body.Content) == 0 {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeMissingPathOrContent})
		return "", "", false
	}
	p, isString := rawString(body.Path)
	if !isString {
		fileError(w, errors.New("path must be a string"))
		return "", "", false
	}
	target, root, err := place(p, s.cfg.Workspace, s.cfg.WriteRoots)
	if err != nil {
		fileError(w, err)
		return "", "", false
	}
	return target, root, true
}

func (s *Server) writeBuffered(w httpd.ResponseWriter, body writeBody) {
	target, root, ok := s.writeTarget(w, body)
	if !ok {
		return
	}
	data, err := contentBytes(body.Content)
	if err != nil {
		fileError(w, errors.New("content must be a string"))
		return
	}
	if e, _ := rawString(body.Encoding); e == "base64" {
		if data, err = decodeBase64(data); err != nil {
			fileError(w, err)
			return
		}
	}
	if _, err := writeFileIn(target, root, bytes.NewReader(data), nil); err != nil {
		fileError(w, err)
		return
	}
	writeJSON(w, httpd.StatusOK, wire.WriteFileResponse{OK: true, BytesWritten: len(data)})
}

// contentBytes is the text of a JSON scalar (as JavaScript's String() would
// render it). A plain string, the common and large case, is used in place.
func contentBytes(raw json.RawMessage) ([]byte, error) {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw[1 : len(raw)-1], nil
	}
	s, err := jsString(raw)
	return []byte(s), err
}

// decodeBase64 accepts standard or URL-safe base64, padded or not, with
// whitespace ignored; anything else is refused rather than half-decoded.
func decodeBase64(b []byte) ([]byte, error) {
	out := make([]byte, base64.StdEncoding.DecodedLen(len(b)))
	if n, err := base64.StdEncoding.Decode(out, b); err == nil {
		return out[:n], nil
	}
	s := strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\n', '\r':
			return -1
		case '-':
			return '+'
		case '_':
			return '/'
		}
		return r
	}, string(b))
	out, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, fmt.Errorf("content is not valid base64: %v", err)
	}
	return out, nil
}
