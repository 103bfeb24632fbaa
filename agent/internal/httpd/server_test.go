package httpd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serve runs a Server with h on a loopback listener; it returns the
// address and a count of the connections accepted.
func serve(t testing.TB, h func(ResponseWriter, *Request), tune ...func(*Server)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := new(atomic.Int64)
	srv := &Server{Handler: handlerFunc(h), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 4 << 10}
	for _, f := range tune {
		f(srv)
	}
	go srv.Serve(countingListener{ln, conns})
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), conns
}

type handlerFunc func(ResponseWriter, *Request)

func (f handlerFunc) ServeHTTP(w ResponseWriter, r *Request) { f(w, r) }

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// raw sends req on a new connection and returns everything the server
// answers until it closes the connection (or a second passes).
func raw(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

func echo(w ResponseWriter, r *Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(StatusBadRequest)
		fmt.Fprint(w, err)
		return
	}
	w.Header().Set("X-Method", r.Method)
	w.Header().Set("X-Uri", r.RequestURI)
	w.Header().Set("X-Length", fmt.Sprint(r.ContentLength))
	w.Write(b)
}

// TestWithNetHTTPClient: net/http's client (the host's) and this server
// agree on framing both ways, and keep one connection alive across
// requests.
func TestWithNetHTTPClient(t *testing.T) {
	addr, conns := serve(t, echo)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	for i, body := range []string{"", "short", strings.Repeat("long body ", 1000)} {
		for _, chunked := range []bool{false, true} {
			var rd io.Reader = strings.NewReader(body)
			if chunked {
				rd = io.MultiReader(rd) // hides the length: the client sends chunks
			}
			req, _ := http.NewRequest("POST", "http://"+addr+"/p?q=1", rd)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(got) != body {
				t.Fatalf("case %d chunked=%v: body %d bytes (%v), want %d", i, chunked, len(got), err, len(body))
			}
			if resp.Header.Get("X-Uri") != "/p?q=1" || resp.Header.Get("X-Method") != "POST" {
				t.Fatalf("request seen as %v", resp.Header)
			}
			wantLen := fmt.Sprint(len(body))
			if chunked && body != "" {
				wantLen = "-1"
			}
			if resp.Header.Get("X-Length") != wantLen && !(chunked && body == "") {
				t.Errorf("ContentLength %s, want %s", resp.Header.Get("X-Length"), wantLen)
			}
			// Up to bufferBeforeChunking bytes go with their length.
			if short := len(body) <= bufferBeforeChunking; short != (resp.ContentLength == int64(len(body))) {
				t.Errorf("a %d-byte answer came with length %d", len(body), resp.ContentLength)
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for one client, want 1", n)
	}
}

// TestStreaming: a flushed write reaches the caller before the handler
// returns.
func TestStreaming(t *testing.T) {
	release := make(chan struct{})
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, "first")
		w.Flush()
		<-release
		fmt.Fprintln(w, "second")
	})
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if l, err := br.ReadString('\n'); l != "first\n" {
		t.Fatalf("%q %v", l, err)
	}
	close(release)
	if l, err := br.ReadString('\n'); l != "second\n" {
		t.Fatalf("%q %v", l, err)
	}
	if rest, err := io.ReadAll(br); len(rest) != 0 || err != nil {
		t.Fatalf("%q %v", rest, err)
	}
}

// TestRefusals: what cannot be read as a request is answered with its
// status and the connection closes.
func TestRefusals(t *testing.T) {
	addr, _ := serve(t, echo)
	for _, c := range []struct{ name, req, status string }{
		{"garbage", "hello\r\n\r\n", "400"},
		{"bad method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", "400"},
		{"bad version", "GET / HTTP/x\r\nHost: a\r\n\r\n", "400"},
		{"HTTP/2", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", "505"},
		{"no host", "GET / HTTP/1.1\r\n\r\n", "400"},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400"},
		{"bad uri", "GET nope HTTP/1.1\r\nHost: a\r\n\r\n", "400"},
		{"bad header", "GET / HTTP/1.1\r\nHost: a\r\nBad Key: v\r\n\r\n", "400"},
		{"bad value", "GET / HTTP/1.1\r\nHost: a\r\nKey: a\x01b\r\n\r\n", "400"},
		{"header too large", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 9<<10) + "\r\n\r\n", "431"},
		{"line too large", "GET /" + strings.Repeat("a", 9<<10) + " HTTP/1.1\r\nHost: a\r\n\r\n", "431"},
		{"conflicting lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "400"},
		{"signed length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\na", "400"},
		{"gzip", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", "501"},
		{"bad chunk", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "400"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := raw(t, addr, c.req)
			if !strings.HasPrefix(got, "HTTP/1.1 "+c.status+" ") {
				t.Fatalf("answered %q, want %s", got, c.status)
			}
			if c.name != "bad chunk" && !strings.Contains(got, "Connection: close") {
				t.Errorf("the connection stays open after %q", got)
			}
		})
	}
}

// TestPipelined: requests sent back to back are answered in order.
func TestPipelined(t *testing.T) {
	addr, _ := serve(t, echo)
	got := raw(t, addr, "POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx"+
		"POST /2 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=1\r\ny\r\n0\r\nTrailer: t\r\n\r\n"+
		"GET /3 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	if strings.Count(got, "HTTP/1.1 200 OK") != 3 || !strings.Contains(got, "\r\n\r\nx") || !strings.Contains(got, "\r\n\r\ny") ||
		strings.Index(got, "X-Uri: /1") > strings.Index(got, "X-Uri: /2") || strings.Index(got, "X-Uri: /2") > strings.Index(got, "X-Uri: /3") {
		t.Fatalf("answered %q", got)
	}
}

// TestHTTP10: an HTTP/1.0 caller's connection closes after its answer,
// which a streamed body ends.
func TestHTTP10(t *testing.T) {
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		w.Write([]byte("a"))
		w.Flush()
		w.Write([]byte("b"))
	})
	got := raw(t, addr, "GET / HTTP/1.0\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(got, "\r\n\r\nab") || strings.Contains(got, "chunked") {
		t.Fatalf("answered %q", got)
	}
}

// TestHeadAndNoContent: neither answer carries a body.
func TestHeadAndNoContent(t *testing.T) {
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		if r.URL.Path == "/none" {
			w.WriteHeader(StatusNoContent)
		}
		if _, err := w.Write([]byte("body")); (err == nil) != (r.Method == "HEAD") {
			t.Errorf("%s %s: write: %v", r.Method, r.URL.Path, err)
		}
	})
	got := raw(t, addr, "HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /none HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	if strings.Contains(got, "body") || !strings.Contains(got, "HTTP/1.1 204 No Content") {
		t.Fatalf("answered %q", got)
	}
}

// TestUnreadBody: a body the handler left unread is read away when it is
// short, so that the connection serves on; a long one closes it, and the
// caller, still sending, gets the answer rather than a reset connection.
func TestUnreadBody(t *testing.T) {
	addr, conns := serve(t, func(w ResponseWriter, r *Request) { w.Write([]byte("ok")) })
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	post := func(n int) *http.Response {
		resp, err := c.Post("http://"+addr+"/", "text/plain", bytes.NewReader(make([]byte, n)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	post(100 << 10)
	post(100 << 10)
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
	if resp := post(16 << 20); !resp.Close {
		t.Fatalf("a 16 MiB unread body left the connection open: %v", resp.Header)
	}
}

// TestContextEndsWhenCallerLeaves: a handler that has read its body learns
// that the caller closed the connection.
func TestContextEndsWhenCallerLeaves(t *testing.T) {
	done := make(chan error, 1)
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		io.ReadAll(r.Body)
		w.Flush()
		select {
		case <-r.Context().Done():
			done <- nil
		case <-time.After(5 * time.Second):
			done <- errors.New("the context outlived the caller")
		}
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
	bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestContextEndsWithHandler: and once the handler returns; a context that
// did not end early did not see the caller as gone.
func TestContextEndsWithHandler(t *testing.T) {
	ctxs := make(chan context.Context, 2)
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		io.ReadAll(r.Body)
		time.Sleep(50 * time.Millisecond)
		if r.Context().Err() != nil {
			t.Error("the context ended while the caller waited")
		}
		ctxs <- r.Context()
	})
	got := raw(t, addr, "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	if strings.Count(got, "200 OK") != 2 {
		t.Fatalf("answered %q", got)
	}
	for range 2 {
		if (<-ctxs).Err() == nil {
			t.Fatal("a context outlived its handler")
		}
	}
}

// TestAbort: a handler that aborts leaves its caller with a broken answer.
func TestAbort(t *testing.T) {
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		w.Header().Set("Content-Length", "10")
		w.Write([]byte("12345"))
		w.Flush()
		panic(ErrAbortHandler)
	})
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read %q, %v; want an unexpected end", b, err)
	}
}

// TestShortContentLength: an answer shorter than it declared closes the
// connection (its caller would wait for the rest); a longer write fails.
func TestShortContentLength(t *testing.T) {
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		w.Header().Set("Content-Length", "3")
		w.Write([]byte("ab"))
		if _, err := w.Write([]byte("cd")); err != ErrContentLength {
			t.Errorf("a write past the length: %v", err)
		}
	})
	if got := raw(t, addr, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); !strings.HasSuffix(got, "\r\n\r\nab") {
		t.Fatalf("answered %q", got)
	}
}

// TestExpectContinue: a caller that waits for 100 Continue gets it when
// the handler reads, and none when it does not (and the connection then
// closes: the body may still come).
func TestExpectContinue(t *testing.T) {
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		if r.URL.Path == "/read" {
			io.ReadAll(r.Body)
		}
	})
	got := raw(t, addr, "POST /read HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
	if !strings.HasPrefix(got, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK") {
		t.Fatalf("answered %q", got)
	}
	got = raw(t, addr, "POST /skip HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK") || !strings.Contains(got, "Connection: close") {
		t.Fatalf("answered %q", got)
	}
}

// TestTimeouts: a caller too slow with its header, or idle too long
// between requests, loses its connection.
func TestTimeouts(t *testing.T) {
	addr, _ := serve(t, echo, func(s *Server) { s.ReadHeaderTimeout, s.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond })
	for _, req := range []string{"GET / HTTP/1.1\r\nHost:", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, req)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = io.ReadAll(c)
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%q: the server kept the connection", req)
		}
	}
}

// TestHeaderValuesStayInTheirLine: a value cannot add a header line.
func TestHeaderValuesStayInTheirLine(t *testing.T) {
	addr, _ := serve(t, func(w ResponseWriter, r *Request) { w.Header().Set("X-A", "a\r\nX-Injected: 1") })
	if got := raw(t, addr, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"); strings.Contains(got, "\nX-Injected") {
		t.Fatalf("answered %q", got)
	}
}

// BenchmarkRoundTrip: one small request and answer on a kept connection,
// against net/http's server with the same handler.
func BenchmarkRoundTrip(b *testing.B) {
	small := func(w ResponseWriter, r *Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}
	run := func(b *testing.B, addr string) {
		c := &http.Client{Transport: &http.Transport{}}
		defer c.CloseIdleConnections()
		for b.Loop() {
			resp, err := c.Post("http://"+addr+"/execute", "application/json", strings.NewReader(`{"command":"true"}`))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("httpd", func(b *testing.B) {
		addr, _ := serve(b, small)
		run(b, addr)
	})
	b.Run("net-http", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ok":true}`))
		}))
		run(b, ln.Addr().String())
	})
}

// TestWriteDeadlineEndsWithHandler: a deadline set from another goroutine
// after the handler returned (the agent sets one when it gives up on a
// caller) does not reach the connection, which serves the next request.
func TestWriteDeadlineEndsWithHandler(t *testing.T) {
	ws := make(chan ResponseWriter, 2)
	addr, conns := serve(t, func(w ResponseWriter, r *Request) {
		ws <- w
		w.Write([]byte("ok"))
	})
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	get := func() {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get()
	w := <-ws
	if err := w.SetWriteDeadline(aLongTimeAgo); err == nil {
		t.Fatal("a deadline was set after the handler returned")
	}
	get()
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want the first kept", n)
	}
}

// TestBodyClosedWithHandler: a body read after its handler returned fails,
// and the connection serves the next request whole.
func TestBodyClosedWithHandler(t *testing.T) {
	bodies := make(chan io.Reader, 2)
	addr, _ := serve(t, func(w ResponseWriter, r *Request) {
		bodies <- r.Body
		w.Write([]byte("ok"))
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	io.WriteString(c, "POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbody")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if n, err := (<-bodies).Read(make([]byte, 8)); n != 0 || err == nil || err == io.EOF {
		t.Fatalf("a read after the handler: %d, %v", n, err)
	}
	io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the next request: %v %v", resp, err)
	}
}
