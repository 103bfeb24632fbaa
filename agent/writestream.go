//go:build linux

package agent

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// streamThreshold: a /write-file body larger than this (or of unknown
// length) is parsed as it arrives, and base64 content that follows the
// path and encoding is decoded straight into the temporary file, so a large
// write costs constant memory. Any other shape is gathered (within the body
// cap) and written as usual.
const streamThreshold = 1 << 20

// capReader fails once more than left bytes are read.
type capReader struct {
	r    io.Reader
	left int64
}

var errTooLarge = errors.New("request body too large")

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, errTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (s *Server) writeFileStreaming(w httpd.ResponseWriter, r *httpd.Request) {
	limit := s.cfg.MaxBodyBytes
	badBody := func(err error) {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: err.Error()})
	}
	if r.ContentLength > limit {
		badBody(fmt.Errorf("request body exceeds %d bytes", limit))
		return
	}
	br := bufio.NewReaderSize(&capReader{r: r.Body, left: limit}, 64<<10)
	fields := map[string]json.RawMessage{}
	var written int64
	streamed := false
	if err := expect(br, '{'); err != nil {
		badBody(err)
		return
	}
	for {
		c, err := nextToken(br)
		if err != nil {
			badBody(err)
			return
		}
		if c == '}' {
			break
		}
		if c == ',' {
			continue
		}
		rawKey, err := readValue(br, 4096)
		if err != nil {
			badBody(err)
			return
		}
		var key string
		if json.Unmarshal(rawKey, &key) != nil {
			badBody(errors.New("request body is not a JSON object"))
			return
		}
		if err := expect(br, ':'); err != nil {
			badBody(err)
			return
		}
		enc, _ := rawString(fields["encoding"])
		if c, _ := nextToken(br); key == "content" && c == '"' && !streamed && fields["path"] != nil && enc == "base64" {
			target, root, ok := s.writeTarget(w, writeBody{Path: fields["path"], Content: json.RawMessage(`""`)})
			if !ok {
				return
			}
			br.ReadByte() // the opening quote
			// What follows is read before the file replaces the old one: a
			// later path, encoding or content would change what JSON.parse
			// makes of the body, so it is refused; anything else is ignored.
			rest := func() error {
				for {
					c, err := nextToken(br)
					if err != nil {
						return err
					}
					if c == '}' {
						return nil
					}
					if c == ',' {
						continue
					}
					k, err := readValue(br, 4096)
					if err != nil {
						return err
					}
					var name string
					_ = json.Unmarshal(k, &name)
					if name == "path" || name == "encoding" || name == "content" {
						return fmt.Errorf("%q appears twice in the body", name)
					}
					if err := expect(br, ':'); err != nil {
						return err
					}
					if _, err := readValue(br, limit); err != nil {
						return err
					}
				}
			}
			written, err = writeFileIn(target, root, base64.NewDecoder(base64.RawStdEncoding, &stringReader{br: br}), rest)
			switch {
			case errors.Is(err, errTooLarge):
				badBody(fmt.Errorf("request body exceeds %d bytes", limit))
			case err != nil:
				fileError(w, err)
			default:
				writeJSON(w, httpd.StatusOK, wire.WriteFileResponse{OK: true, BytesWritten: int(written)})
			}
			return
		}
		raw, err := readValue(br, limit)
		if err != nil {
			badBody(err)
			return
		}
		fields[key] = raw // the last occurrence wins, as in JSON.parse
	}
	s.writeBuffered(w, writeBody{Path: fields["path"], Content: fields["content"], Encoding: fields["encoding"]})
}

// nextToken skips white space and returns, without consuming unless it is
// a separator, the next byte.
func nextToken(br *bufio.Reader) (byte, error) {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case ',', '}':
			return c, nil
		}
		return c, br.UnreadByte()
	}
}

func expect(br *bufio.Reader, want byte) error {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case want:
			return nil
		}
		return fmt.Errorf("request body is not a JSON object (found %q where %q belongs)", c, want)
	}
}

// readValue reads one JSON value, raw, of at most max bytes.
func readValue(br *bufio.Reader, max int64) (json.RawMessage, error) {
	var out []byte
	depth, inString, escaped := 0, false, false
	for {
		c, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		if int64(len(out)) >= max {
			return nil, errTooLarge
		}
		if len(out) == 0 && (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
			continue
		}
		switch {
		case inString:
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if depth == 0 {
					return validRaw(out)
				}
			}
			continue
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				br.UnreadByte()
				return validRaw(out)
			}
			depth--
			if depth == 0 {
				return validRaw(append(out, c))
			}
		case depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n'):
			br.UnreadByte()
			return validRaw(out)
		}
		out = append(out, c)
	}
}

func validRaw(b []byte) (json.RawMessage, error) {
	if !json.Valid(b) {
		return nil, errors.New("request body is not valid JSON")
	}
	return b, nil
}

// stringReader yields the inside of a JSON string (its opening quote
// already read) up to the closing quote, as the base64 decodeBase64
// accepts: standard or URL-safe alphabet, padding and white space dropped.
// Base64 needs no escapes; "\/" is accepted, any other escape is an error.
type stringReader struct {
	br   *bufio.Reader
	done bool
}

func (s *stringReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && !s.done {
		if n > 0 && s.br.Buffered() == 0 {
			break // hand over what there is rather than wait
		}
		c, err := s.br.ReadByte()
		if err != nil {
			return n, err
		}
		switch c {
		case '"':
			s.done = true
			continue
		case '\\':
			if e, err := s.br.ReadByte(); err != nil || e != '/' {
				return n, errors.New("content is not valid base64")
			}
			c = '/'
		case '=', ' ', '\t', '\r', '\n':
			continue
		case '-':
			c = '+'
		case '_':
			c = '/'
		}
		p[n] = c
		n++
	}
	if n == 0 && s.done {
		return 0, io.EOF
	}
	return n, nil
}
