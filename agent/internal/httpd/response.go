package httpd

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ResponseWriter is how a handler answers.
type ResponseWriter interface {
	// Header is the response's header, to set before WriteHeader or the
	// first Write. A Content-Length set here frames the body; without one
	// a body that ends before bufferBeforeChunking bytes and any flush gets
	// one, and any other is sent chunked.
	Header() Header
	// WriteHeader sets the status (200 unless called before Write).
	WriteHeader(status int)
	Write(p []byte) (int, error)
	// Flush sends the head and what is written so far.
	Flush() error
	// SetWriteDeadline bounds every later write to the caller.
	SetWriteDeadline(t time.Time) error
}

// bufferBeforeChunking is how much body a response holds back before it
// commits to chunked framing (a short answer then goes with its length).
const bufferBeforeChunking = 2 << 10

// maxDiscard is how much of a body its handler left unread the server
// reads away to keep the connection; beyond it the connection closes.
const maxDiscard = 256 << 10

var (
	// ErrBodyNotAllowed: a write to a response whose status or method has
	// no body.
	ErrBodyNotAllowed = errors.New("httpd: request method or response status code does not allow body")
	// ErrContentLength: a write beyond the declared Content-Length.
	ErrContentLength = errors.New("httpd: wrote more than the declared Content-Length")
)

type response struct {
	c      *conn
	req    *Request
	header Header

	status        int
	wroteHeader   bool  // the status is set
	committed     bool  // the head is on its way
	contentLength int64 // declared, or -1
	written       int64
	chunked       bool
	closeAfter    bool
	unread        bool   // the caller may still be sending a body
	pending       []byte // body held back before the head is committed
	err           error  // the first failed write

	// done is set once the handler has returned; SetWriteDeadline, the one
	// method another goroutine may call, then no longer reaches the
	// connection, which may be serving the next request.
	mu   sync.Mutex
	done bool
}

func (w *response) Header() Header { return w.header }

// Hijack takes the connection over, for a protocol that follows the
// request on it (an Upgrade): the server neither reads, writes nor closes
// it any more. What the caller sent past the request is in the reader.
// The handler writes its own answer (101 Switching Protocols) and closes
// the connection when done. It fails once a response has begun.
func (w *response) Hijack() (net.Conn, *bufio.Reader, error) {
	if w.wroteHeader || w.committed {
		return nil, nil, errors.New("httpd: hijack after the response began")
	}
	c := w.c
	c.cr.abortPendingRead()
	c.hijacked = true
	return c.nc, c.br, nil
}

func (w *response) WriteHeader(status int) {
	if w.wroteHeader {
		return
	}
	if status < 200 || status > 999 {
		panic("httpd: invalid response status " + strconv.Itoa(status))
	}
	w.wroteHeader, w.status = true, status
	if cl := w.header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.contentLength = n
		} else {
			w.header.Del("Content-Length")
		}
	}
}

// bodyAllowed reports whether the response carries a body on the wire.
func (w *response) bodyAllowed() bool {
	return w.status != StatusNoContent && w.status != StatusNotModified && w.req.Method != "HEAD"
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(StatusOK)
	}
	if !w.bodyAllowed() {
		if w.req.Method == "HEAD" {
			return len(p), nil
		}
		return 0, ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if w.contentLength < 0 && len(w.pending)+len(p) <= bufferBeforeChunking {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.commit(false)
	}
	w.writeBody(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

func (w *response) Flush() error {
	if !w.wroteHeader {
		w.WriteHeader(StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	if w.err == nil {
		w.err = w.c.bw.Flush()
	}
	return w.err
}

// SetWriteDeadline may be called from any goroutine.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return errHandlerDone
	}
	w.c.writeDeadline = true
	return w.c.nc.SetWriteDeadline(t)
}

var errHandlerDone = errors.New("httpd: the response's handler has returned")

// handlerDone marks the handler returned (see done).
func (w *response) handlerDone() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// sendContinue tells a caller that waits for it to send its body.
func (w *response) sendContinue() error {
	if w.committed {
		return nil
	}
	if _, err := w.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
		return err
	}
	return w.c.bw.Flush()
}

// commit writes the head, choosing the body's framing; final says the
// handler has returned, so that the whole body is what is pending.
func (w *response) commit(final bool) {
	w.committed = true
	h := w.header
	switch {
	case !w.bodyAllowed():
		if w.req.Method != "HEAD" {
			h.Del("Content-Length")
		}
	case w.contentLength >= 0:
	case final:
		w.contentLength = int64(len(w.pending))
		h.Set("Content-Length", strconv.Itoa(len(w.pending)))
	case w.req.Proto == "HTTP/1.1":
		w.chunked = true
		h.Set("Transfer-Encoding", "chunked")
	default: // an HTTP/1.0 caller: the body ends with the connection
		w.closeAfter = true
	}
	if w.req.close {
		w.closeAfter = true
	}
	if final && !w.req.Body.(*body).discard(maxDiscard) {
		// The caller is still sending what nobody reads.
		w.closeAfter, w.unread = true, true
	}
	if w.closeAfter {
		h.Set("Connection", "close")
	}
	if _, ok := h["Date"]; !ok {
		h.Set("Date", time.Now().UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"))
	}
	bw := w.c.bw
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(w.status))
	bw.WriteByte(' ')
	bw.WriteString(StatusText(w.status))
	bw.WriteString("\r\n")
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			// A value cannot break the head: line breaks become spaces.
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	_, err := bw.WriteString("\r\n")
	if err != nil && w.err == nil {
		w.err = err
	}
	pending := w.pending
	w.pending = nil
	if len(pending) > 0 {
		w.writeBody(pending)
	}
}

func (w *response) writeBody(p []byte) {
	if w.err != nil || len(p) == 0 {
		return
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	_, err := bw.Write(p)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		w.err = err
	}
}

// finish completes the response once the handler has returned, and
// reports whether the connection can carry another request.
func (w *response) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(StatusOK)
	}
	if !w.committed {
		w.commit(true)
	} else if !w.req.Body.(*body).discard(maxDiscard) {
		w.closeAfter, w.unread = true, true
	}
	if w.chunked && w.err == nil {
		_, w.err = io.WriteString(w.c.bw, "0\r\n\r\n")
	}
	if w.err == nil {
		w.err = w.c.bw.Flush()
	}
	if w.contentLength >= 0 && w.written < w.contentLength && w.bodyAllowed() {
		return false // the caller waits for bytes that will never come
	}
	return w.err == nil && !w.closeAfter
}

// Methods the agent routes on.
const (
	MethodGet    = "GET"
	MethodPost   = "POST"
	MethodPut    = "PUT"
	MethodDelete = "DELETE"
)

// Statuses the agent answers with.
const (
	StatusOK                           = 200
	StatusCreated                      = 201
	StatusNoContent                    = 204
	StatusPartialContent               = 206
	StatusNotModified                  = 304
	StatusBadRequest                   = 400
	StatusUnauthorized                 = 401
	StatusForbidden                    = 403
	StatusNotFound                     = 404
	StatusConflict                     = 409
	StatusGone                         = 410
	StatusLengthRequired               = 411
	StatusRequestEntityTooLarge        = 413
	StatusRequestedRangeNotSatisfiable = 416
	StatusRequestHeaderFieldsTooLarge  = 431
	StatusInternalServerError          = 500
	StatusNotImplemented               = 501
	StatusBadGateway                   = 502
	StatusServiceUnavailable           = 503
	StatusGatewayTimeout               = 504
	StatusHTTPVersionNotSupported      = 505
	StatusInsufficientStorage          = 507
)

// StatusText is the reason phrase for status ("Status N" for one the agent
// does not use).
func StatusText(status int) string {
	switch status {
	case StatusOK:
		return "OK"
	case StatusCreated:
		return "Created"
	case StatusNoContent:
		return "No Content"
	case StatusPartialContent:
		return "Partial Content"
	case StatusNotModified:
		return "Not Modified"
	case StatusBadRequest:
		return "Bad Request"
	case StatusForbidden:
		return "Forbidden"
	case StatusInsufficientStorage:
		return "Insufficient Storage"
	case StatusUnauthorized:
		return "Unauthorized"
	case StatusNotFound:
		return "Not Found"
	case StatusConflict:
		return "Conflict"
	case StatusGone:
		return "Gone"
	case StatusLengthRequired:
		return "Length Required"
	case StatusRequestEntityTooLarge:
		return "Request Entity Too Large"
	case StatusRequestedRangeNotSatisfiable:
		return "Requested Range Not Satisfiable"
	case StatusRequestHeaderFieldsTooLarge:
		return "Request Header Fields Too Large"
	case StatusInternalServerError:
		return "Internal Server Error"
	case StatusNotImplemented:
		return "Not Implemented"
	case StatusBadGateway:
		return "Bad Gateway"
	case StatusServiceUnavailable:
		return "Service Unavailable"
	case StatusGatewayTimeout:
		return "Gateway Timeout"
	case StatusHTTPVersionNotSupported:
		return "HTTP Version Not Supported"
	}
	return "Status " + strconv.Itoa(status)
}
