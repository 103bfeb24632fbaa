package httpd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Header is a request's or a response's header, keyed by canonical name.
type Header = textproto.MIMEHeader

// Request is one request as the server read it.
type Request struct {
	Method     string
	RequestURI string   // as sent on the request line
	URL        *url.URL // RequestURI parsed
	Proto      string   // "HTTP/1.1" or "HTTP/1.0"
	Header     Header
	// ContentLength is the body's declared length; -1 when it is chunked.
	ContentLength int64
	// Body is the request's body (empty when it has none). The server
	// closes it; a handler need not.
	Body io.ReadCloser

	close bool // the caller asked to close the connection after this one
	ctx   context.Context
}

// Context ends when the caller goes away (its connection closes) or the
// handler returns.
func (r *Request) Context() context.Context { return r.ctx }

// requestError is a request the server refuses with status.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{StatusBadRequest, fmt.Sprintf(format, args...)}
}

// readRequest reads a request's line and header from br, and sets up its
// body to be read from br.
func readRequest(br *bufio.Reader) (*Request, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	method, rest, ok1 := strings.Cut(line, " ")
	uri, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return nil, badRequest("malformed request line %q", line)
	}
	if !isToken(method) {
		return nil, badRequest("invalid method %q", method)
	}
	r := &Request{Method: method, RequestURI: uri, Proto: proto}
	switch proto {
	case "HTTP/1.1":
	case "HTTP/1.0":
		r.close = true
	default:
		// HTTP/2 or later is a version this server does not speak; anything
		// else is no version at all.
		if v, ok := strings.CutPrefix(proto, "HTTP/"); ok && len(v) == 3 && v[0] >= '2' && v[0] <= '9' && v[1] == '.' && v[2] >= '0' && v[2] <= '9' {
			return nil, &requestError{StatusHTTPVersionNotSupported, "unsupported protocol version " + proto}
		}
		return nil, badRequest("malformed HTTP version %q", proto)
	}
	if r.URL, err = url.ParseRequestURI(uri); err != nil {
		return nil, badRequest("%v", err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		var pe textproto.ProtocolError
		if errors.As(err, &pe) {
			return nil, badRequest("%v", err)
		}
		return nil, err
	}
	r.Header = h
	// textproto takes what MIME allows; HTTP allows less (RFC 9110, 5.1
	// and 5.5), and net/http's server refuses the rest too.
	for k, vs := range h {
		if !isToken(k) {
			return nil, badRequest("invalid header name %q", k)
		}
		for _, v := range vs {
			if !validValue(v) {
				return nil, badRequest("invalid value of header %s", k)
			}
		}
	}
	if hosts := h["Host"]; len(hosts) > 1 || len(hosts) == 0 && proto == "HTTP/1.1" {
		return nil, badRequest("a request needs exactly one Host header")
	}
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			switch strings.ToLower(textproto.TrimString(tok)) {
			case "close":
				r.close = true
			case "keep-alive":
				if proto == "HTTP/1.0" {
					r.close = false
				}
			}
		}
	}
	return r, r.setBody(br)
}

// setBody frames the body: chunked, or of the declared length, or empty.
// A declared length must be sound even beside chunked framing, which then
// wins (RFC 9112, 6.3).
func (r *Request) setBody(br *bufio.Reader) error {
	b := &body{expectContinue: expectsContinue(r.Header)}
	r.Body = b
	if cls := r.Header["Content-Length"]; len(cls) > 0 {
		for _, v := range cls[1:] {
			if textproto.TrimString(v) != textproto.TrimString(cls[0]) {
				return badRequest("conflicting Content-Length values %q", cls)
			}
		}
		cl := textproto.TrimString(cls[0])
		n, err := strconv.ParseUint(cl, 10, 63)
		if err != nil { // digits only: no sign, no spaces inside
			return badRequest("invalid Content-Length %q", cl)
		}
		r.ContentLength = int64(n)
	}
	if te, ok := r.Header["Transfer-Encoding"]; ok && r.Proto != "HTTP/1.0" {
		if len(te) != 1 || !strings.EqualFold(textproto.TrimString(te[0]), "chunked") {
			return &requestError{StatusNotImplemented, fmt.Sprintf("unsupported transfer encoding %q", te)}
		}
		r.Header.Del("Content-Length")
		r.ContentLength = -1
		b.src = &chunkedReader{br: br}
		return nil
	}
	if r.ContentLength == 0 {
		b.eof, b.expectContinue = true, false
		return nil
	}
	b.src = &fixedReader{br: br, left: r.ContentLength}
	return nil
}

func expectsContinue(h Header) bool {
	return strings.EqualFold(textproto.TrimString(h.Get("Expect")), "100-continue")
}

// isToken: s is an RFC 9110 token, as a method and a header name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validValue: a header value holds no control character but tab.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// body is a request's body. The server hooks it: a caller that expects
// 100 Continue is told to go on at the first read (proceed), and reading to
// the end starts the background read that notices the caller going away
// (atEOF).
type body struct {
	mu             sync.Mutex
	src            io.Reader
	expectContinue bool
	eof, closed    bool
	proceed        func() error
	atEOF          func()
}

var errBodyClosed = errors.New("httpd: read of a closed request body")

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBodyClosed
	}
	if b.eof {
		return 0, io.EOF
	}
	if b.expectContinue {
		b.expectContinue = false
		if b.proceed != nil {
			if err := b.proceed(); err != nil {
				return 0, err
			}
		}
	}
	n, err := b.src.Read(p)
	if err == io.EOF {
		b.eof = true
		if b.atEOF != nil {
			b.atEOF()
		}
	}
	return n, err
}

// Close makes further reads fail; what is left unread the server discards
// (or closes the connection over).
func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

func (b *body) done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// discard reads what the handler left of the body, up to max bytes; it
// reports whether the body then ended cleanly, so that the connection can
// carry the next request. A caller still waiting for 100 Continue sent no
// body at all.
func (b *body) discard(max int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.eof {
		return true
	}
	if b.expectContinue {
		return false
	}
	n, err := io.CopyN(io.Discard, b.src, max+1)
	if err == io.EOF && n <= max {
		b.eof = true
		return true
	}
	return false
}

// fixedReader reads a body of a declared length.
type fixedReader struct {
	br   *bufio.Reader
	left int64
}

func (f *fixedReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.br.Read(p)
	f.left -= int64(n)
	if f.left == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the caller closed mid-body
	}
	return n, err
}

// maxChunkLine bounds a chunk's size line, extensions included.
const maxChunkLine = 4 << 10

// chunkedReader decodes a chunked body (RFC 9112, 7.1); trailers are read
// and dropped.
type chunkedReader struct {
	br   *bufio.Reader
	left uint64 // of the current chunk
	err  error
}

var errChunk = &requestError{StatusBadRequest, "malformed chunked encoding"}

func (c *chunkedReader) Read(p []byte) (int, error) {
	for c.err == nil && c.left == 0 {
		c.nextChunk()
	}
	if c.err != nil {
		return 0, c.err
	}
	if uint64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= uint64(n)
	if c.left == 0 && err == nil {
		err = c.crlf()
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	c.err = err
	return n, err
}

// nextChunk reads a chunk's size line; after the last chunk it reads the
// trailers and ends the body.
func (c *chunkedReader) nextChunk() {
	line, err := c.line()
	if err != nil {
		c.err = err
		return
	}
	size, _, _ := strings.Cut(line, ";") // extensions are ignored
	size = strings.TrimRight(size, " \t")
	n, err := strconv.ParseUint(size, 16, 64)
	if err != nil || size == "" || n > 1<<62 {
		c.err = errChunk
		return
	}
	if n > 0 {
		c.left = n
		return
	}
	for total := 0; ; {
		t, err := c.line()
		if err != nil {
			c.err = err
			return
		}
		if t == "" {
			c.err = io.EOF
			return
		}
		// A trailer is a header field, read and dropped: at most
		// maxTrailer bytes of them.
		name, value, ok := strings.Cut(t, ":")
		if total += len(t); !ok || !isToken(name) || !validValue(value) || total > maxTrailer {
			c.err = errChunk
			return
		}
	}
}

// maxTrailer bounds the trailers of a chunked body.
const maxTrailer = 64 << 10

// line reads one CRLF-ended line of at most maxChunkLine bytes.
func (c *chunkedReader) line() (string, error) {
	var b []byte
	for {
		frag, err := c.br.ReadSlice('\n')
		b = append(b, frag...)
		if len(b) > maxChunkLine {
			return "", errChunk
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		break
	}
	if len(b) < 2 || b[len(b)-2] != '\r' {
		return "", errChunk
	}
	return string(b[:len(b)-2]), nil
}

// crlf reads the CRLF that ends a chunk's data.
func (c *chunkedReader) crlf() error {
	var b [2]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return err
	}
	if b != [2]byte{'\r', '\n'} {
		return errChunk
	}
	return nil
}
