// Package httpd is the agent's HTTP/1.1 server: what the agent wire needs
// of a server (keep-alive, chunked bodies both ways, streaming with
// flushes, bounded headers, idle and header timeouts, a request context
// that ends when the caller goes away), and nothing else.
//
// The agent starts in every sandbox, and net/http's server links TLS,
// HTTP/2 and MIME tables whose package initialisation every start pays for:
// some 60 page faults and 0.5–1 ms a start on our machines, several ms
// under gVisor, and half the agent's binary. Requests are parsed with
// net/textproto, as net/http parses them.
package httpd

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"time"
)

// Handler answers one request. A handler that panics with ErrAbortHandler
// ends the connection at once, without finishing the response, so that the
// caller sees the answer broken rather than complete.
type Handler interface {
	ServeHTTP(ResponseWriter, *Request)
}

// ErrAbortHandler aborts a response (see Handler).
var ErrAbortHandler = errors.New("httpd: abort handler")

// Server serves HTTP/1.1 on the connections of a listener.
type Server struct {
	Handler Handler
	// ReadHeaderTimeout bounds reading a request's line and headers, from
	// its first byte; IdleTimeout bounds the wait for the next request on a
	// kept-alive connection. Zero means no bound.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers (431 beyond it),
	// give or take 4 KiB: the bound is on what is read from the
	// connection, which may run into the body (net/http allows as much);
	// zero means 1 MiB.
	MaxHeaderBytes int
	// ErrorLog receives what a caller cannot be told (a handler's panic, a
	// failed accept); nil discards it.
	ErrorLog *log.Logger
}

// Serve accepts connections on ln and serves each on its own goroutine
// until ln fails (for instance, is closed); it returns that error.
func (s *Server) Serve(ln net.Listener) error {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of descriptors and the like: wait, then try again.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logf("httpd: accept: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		go s.newConn(nc).serve()
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
	}
}

func (s *Server) maxHeaderBytes() int64 {
	if s.MaxHeaderBytes > 0 {
		return int64(s.MaxHeaderBytes)
	}
	return 1 << 20
}

// conn is one connection and the requests it carries, one at a time.
type conn struct {
	srv *Server
	nc  net.Conn
	cr  *connReader
	br  *bufio.Reader
	bw  *bufio.Writer

	mu     sync.Mutex
	cancel context.CancelFunc // the current request's context

	writeDeadline bool // a handler set one, for its request only
	// hijacked: a handler took the connection over (response.Hijack); the
	// server no longer reads, writes or closes it.
	hijacked bool
}

func (s *Server) newConn(nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc}
	c.cr = &connReader{c: c}
	c.cr.cond = sync.NewCond(&c.cr.mu)
	c.br = bufio.NewReaderSize(c.cr, 4<<10)
	c.bw = bufio.NewWriterSize(connWriter{c}, 4<<10)
	return c
}

// cancelRequest ends the current request's context: the caller is gone.
func (c *conn) cancelRequest() {
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *conn) serve() {
	defer func() {
		if !c.hijacked {
			c.nc.Close()
		}
	}()
	defer func() {
		if p := recover(); p != nil && p != ErrAbortHandler {
			c.srv.logf("httpd: panic serving %v: %v", c.nc.RemoteAddr(), p)
		}
	}()
	for first := true; ; first = false {
		if !first {
			// Between requests: wait for the next one's first byte.
			if d := c.srv.IdleTimeout; d > 0 {
				_ = c.nc.SetReadDeadline(time.Now().Add(d))
			}
			if _, err := c.br.Peek(1); err != nil {
				return
			}
		}
		if d := c.srv.ReadHeaderTimeout; d > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(d))
		} else if !first {
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		if c.writeDeadline {
			_ = c.nc.SetWriteDeadline(time.Time{})
			c.writeDeadline = false
		}
		c.cr.setLimit(c.srv.maxHeaderBytes() + 4<<10) // the line and bufio's slack
		req, err := readRequest(c.br)
		if err != nil {
			c.refuse(err)
			return
		}
		c.cr.setLimit(maxInt64)
		_ = c.nc.SetReadDeadline(time.Time{})
		if !c.handle(req) {
			return
		}
	}
}

// refuse answers a request that could not be read, if there is anyone to
// answer: the connection then closes.
func (c *conn) refuse(err error) {
	var ne net.Error
	switch {
	case c.cr.hitLimit():
		err = &requestError{StatusRequestHeaderFieldsTooLarge, "request header too large"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne):
		return // gone, or too slow: nobody to tell
	}
	re, ok := err.(*requestError)
	if !ok {
		re = &requestError{StatusBadRequest, err.Error()}
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	body := strconv.Itoa(re.status) + " " + StatusText(re.status) + ": " + re.msg
	_, _ = io.WriteString(c.nc, "HTTP/1.1 "+strconv.Itoa(re.status)+" "+StatusText(re.status)+"\r\n"+
		"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
	c.lingerClose()
}

// lingerTime bounds lingerClose.
const lingerTime = 500 * time.Millisecond

// lingerClose ends a connection whose caller may still be sending (a body
// nobody read, a refused request): it stops writing, then reads away what
// still comes for a while. Closing with unread input would reset the
// connection, and the caller could lose the answer before reading it.
func (c *conn) lingerClose() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.Copy(io.Discard, c.nc)
}

// handle runs the handler on req and finishes its response; it reports
// whether the connection can carry another request.
func (c *conn) handle(req *Request) (keep bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	req.ctx = ctx
	w := &response{c: c, req: req, header: Header{}, contentLength: -1}
	b := req.Body.(*body)
	b.proceed, b.atEOF = w.sendContinue, c.cr.startBackgroundRead
	if b.done() {
		// Nothing more to read: a read now can only tell that the caller
		// went away.
		c.cr.startBackgroundRead()
	}
	aborted := true
	func() {
		defer func() {
			if p := recover(); p != nil && p != ErrAbortHandler {
				c.srv.logf("httpd: panic serving %s: %v", req.RequestURI, p)
			}
		}()
		c.srv.Handler.ServeHTTP(w, req)
		aborted = false
	}()
	if c.hijacked {
		return false
	}
	w.handlerDone()
	// A goroutine the handler left behind cannot read on into the next
	// request; what is left of the body, finish reads away itself.
	b.Close()
	if !aborted {
		// The answer's end goes out first: stopping the background read
		// waits for its goroutine to wake, and the caller need not.
		keep = w.finish()
	}
	c.cr.abortPendingRead()
	c.mu.Lock()
	c.cancel = nil
	c.mu.Unlock()
	if !keep && w.unread {
		c.lingerClose()
	}
	return keep
}

// connWriter writes to the connection; a failed write means the caller is
// gone, which ends the request's context.
type connWriter struct{ c *conn }

func (w connWriter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	if err != nil {
		w.c.cancelRequest()
	}
	return n, err
}

const maxInt64 = 1<<63 - 1

var aLongTimeAgo = time.Unix(1, 0)

// connReader is what the connection's bufio.Reader reads from: the
// connection, with a limit (on a request's head) and a one-byte read in the
// background while a handler runs with nothing left to read, which notices
// the caller closing the connection and ends the request's context.
type connReader struct {
	c *conn

	mu      sync.Mutex
	cond    *sync.Cond
	inRead  bool // a read is in progress (in the background or not)
	aborted bool // the background read was ended on purpose
	hasByte bool // the background read got a byte: the next request's first
	byteBuf [1]byte
	remain  int64
}

func (cr *connReader) setLimit(n int64) {
	cr.mu.Lock()
	cr.remain = n
	cr.mu.Unlock()
}

func (cr *connReader) hitLimit() bool {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return cr.remain <= 0
}

func (cr *connReader) Read(p []byte) (int, error) {
	cr.mu.Lock()
	if cr.inRead {
		cr.mu.Unlock()
		return 0, errors.New("httpd: concurrent read of a request body")
	}
	if cr.remain <= 0 {
		cr.mu.Unlock()
		return 0, io.EOF
	}
	if len(p) == 0 {
		cr.mu.Unlock()
		return 0, nil
	}
	if int64(len(p)) > cr.remain {
		p = p[:cr.remain]
	}
	if cr.hasByte {
		p[0], cr.hasByte = cr.byteBuf[0], false
		cr.remain--
		cr.mu.Unlock()
		return 1, nil
	}
	cr.inRead = true
	cr.mu.Unlock()
	n, err := cr.c.nc.Read(p)
	cr.mu.Lock()
	cr.inRead = false
	cr.remain -= int64(n)
	cr.mu.Unlock()
	cr.cond.Broadcast()
	if err != nil {
		cr.c.cancelRequest()
	}
	return n, err
}

func (cr *connReader) startBackgroundRead() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.inRead || cr.hasByte {
		return
	}
	cr.inRead = true
	_ = cr.c.nc.SetReadDeadline(time.Time{})
	go cr.backgroundRead()
}

func (cr *connReader) backgroundRead() {
	n, err := cr.c.nc.Read(cr.byteBuf[:])
	cr.mu.Lock()
	if n == 1 {
		// A pipelined request's first byte: kept for the next read.
		cr.hasByte = true
	}
	var ne net.Error
	gone := err != nil && !(cr.aborted && errors.As(err, &ne) && ne.Timeout())
	cr.aborted, cr.inRead = false, false
	cr.mu.Unlock()
	cr.cond.Broadcast()
	if gone {
		cr.c.cancelRequest()
	}
}

// abortPendingRead ends a background read and waits until it has.
func (cr *connReader) abortPendingRead() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if !cr.inRead {
		return
	}
	cr.aborted = true
	_ = cr.c.nc.SetReadDeadline(aLongTimeAgo)
	for cr.inRead {
		cr.cond.Wait()
	}
	_ = cr.c.nc.SetReadDeadline(time.Time{})
}
