package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// connect serves CONNECT host:port: decide, dial, then check the TLS
// ClientHello's SNI against the CONNECT host before carrying bytes.
func (b *Binding) connect(c net.Conn, br *bufio.Reader, req *http.Request, start time.Time) {
	rec := Record{Time: start, Sandbox: b.sandbox, Method: "CONNECT"}
	host, port, err := splitHostPort(req.Host, 0)
	if err != nil {
		rec.Host = req.Host
		b.refuse(c, rec, &refusal{reason: "CONNECT needs host:port: " + err.Error()})
		return
	}
	rec.Host, rec.Port = host, port
	ctx, cancel := context.WithTimeout(context.Background(), b.p.cfg.MaxLifetime)
	defer cancel()
	up, addr, ok := b.open(ctx, c, &rec)
	if !ok {
		return
	}
	t := &tunnel{host: host, port: port, addr: addr, client: c, up: up}
	if !b.track(t) {
		up.Close()
		return
	}
	defer b.untrack(t)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		return
	}
	// A TLS client speaks first: its ClientHello must name the host the
	// tunnel was allowed for. Other protocols pass as they are.
	_ = c.SetReadDeadline(time.Now().Add(b.p.cfg.HeaderTimeout))
	if first, err := br.Peek(1); err == nil && first[0] == 0x16 {
		sni, err := readSNI(br)
		if err != nil || (sni != "" && !sameHost(sni, host)) {
			reason := "TLS server name " + sni + " differs from the CONNECT host"
			if err != nil {
				reason = "unreadable TLS ClientHello: " + err.Error()
			}
			up.Close()
			rec.Decision, rec.Reason, rec.DurationMs = "refused", reason, time.Since(start).Milliseconds()
			b.record(rec)
			return
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	rec.BytesUp, rec.BytesDown = b.pipe(c, br, up)
	rec.Decision, rec.DurationMs = "allowed", time.Since(start).Milliseconds()
	b.record(rec)
}

// open dials rec's host and port under the policy, recording the rule and
// address, or answers the refusal; ok says whether a connection was made.
func (b *Binding) open(ctx context.Context, c net.Conn, rec *Record) (net.Conn, netip.Addr, bool) {
	up, addr, rule, err := b.dial(ctx, rec.Host, rec.Port)
	rec.Rule = rule
	if err != nil {
		r, ok := err.(*refusal)
		if !ok {
			r = &refusal{reason: err.Error()}
		}
		b.refuse(c, *rec, r)
		return nil, netip.Addr{}, false
	}
	rec.Addr = addr.String()
	return up, addr, true
}

func sameHost(sni, host string) bool {
	n, err := NormalizeHost(sni)
	return err == nil && n == host
}

func (b *Binding) track(t *tunnel) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return false
	}
	b.tunnels[t] = struct{}{}
	return true
}

func (b *Binding) untrack(t *tunnel) {
	b.mu.Lock()
	delete(b.tunnels, t)
	b.mu.Unlock()
	t.close()
}

// pipe carries bytes both ways until either side ends, the connection idles
// past IdleTimeout, or MaxLifetime passes; it returns the bytes each way.
// Between two TCP sockets (upstream, and a connection the sandbox handed
// over) the kernel splices the bytes, which never pass through this
// process; activity is read from upstream's counters in the kernel.
func (b *Binding) pipe(c net.Conn, br *bufio.Reader, up net.Conn) (upN, downN int64) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	deadline := time.Now().Add(b.p.cfg.MaxLifetime)
	progress := tcpProgress(up)
	// What the head's reader holds goes first; then the client's own
	// connection.
	if k := br.Buffered(); k > 0 {
		held, _ := br.Peek(k)
		w, err := up.Write(held)
		upN += int64(w)
		if err != nil {
			return upN, 0
		}
	}
	// Splicing pays between two TCP sockets; from a unix socket (a bridge
	// that carries the bytes) copying through a buffer is faster.
	_, spliced := c.(*net.TCPConn)
	done := make(chan struct{})
	var wg sync.WaitGroup
	copyOne := func(dst net.Conn, src io.Reader, n *int64) {
		defer wg.Done()
		if progress == nil {
			src = &touching{Reader: src, last: &last}
		}
		var k int64
		if spliced {
			k, _ = io.Copy(dst, src)
		} else {
			// (Neither side may choose its own way of copying.)
			k, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, 64<<10))
		}
		*n += k
		// Half-close so the other direction can finish.
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go copyOne(up, c, &upN)
	go copyOne(c, up, &downN)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var moved uint64
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				if progress != nil {
					if m := progress(); m != moved {
						moved = m
						last.Store(now.UnixNano())
					}
				}
				if now.After(deadline) || now.Sub(time.Unix(0, last.Load())) > b.p.cfg.IdleTimeout {
					c.Close()
					up.Close()
					return
				}
			}
		}
	}()
	wg.Wait()
	close(done)
	return upN, downN
}

// touching notes the time of each read that carried bytes, where the
// kernel cannot tell (tcpProgress).
type touching struct {
	io.Reader
	last *atomic.Int64
}

func (t *touching) Read(p []byte) (int, error) {
	n, err := t.Reader.Read(p)
	if n > 0 {
		t.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// forward serves a plain-HTTP absolute-form request, one per connection.
func (b *Binding) forward(c net.Conn, br *bufio.Reader, req *http.Request, hostHeader string, start time.Time) {
	rec := Record{Time: start, Sandbox: b.sandbox, Method: req.Method}
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		rec.Host = req.Host
		b.refuse(c, rec, &refusal{reason: "the proxy takes absolute http:// URLs and CONNECT; use HTTPS_PROXY for https"})
		return
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		rec.Host = req.URL.Host
		b.refuse(c, rec, &refusal{reason: err.Error()})
		return
	}
	rec.Host, rec.Port = host, port
	// The Host header must name the same host the URL does.
	if hostHeader != "" {
		hh, hp, err := splitHostPort(hostHeader, 80)
		if err != nil || hh != host || hp != port {
			b.refuse(c, rec, &refusal{reason: "the Host header " + hostHeader + " does not match the request URL's host"})
			return
		}
	}
	// The body follows the head on the client connection.
	req.Body = io.NopCloser(io.LimitReader(br, max(req.ContentLength, 0)))
	if req.ContentLength < 0 || len(req.TransferEncoding) > 0 {
		b.refuse(c, rec, &refusal{reason: "request bodies must carry a Content-Length"})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.p.cfg.MaxLifetime)
	defer cancel()
	up, _, ok := b.open(ctx, c, &rec)
	if !ok {
		return
	}
	defer up.Close()
	out := req.Clone(ctx)
	out.RequestURI = ""
	removeHopHeaders(out.Header)
	out.Header.Set("Connection", "close")
	counter := &countingConn{Conn: up}
	if err := out.Write(counter); err != nil {
		writeStatus(c, http.StatusBadGateway, "cordon egress: upstream write failed")
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(counter), out)
	if err != nil {
		writeStatus(c, http.StatusBadGateway, "cordon egress: upstream answered malformed HTTP")
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	resp.Close = true
	_ = resp.Write(c)
	rec.BytesUp, rec.BytesDown = counter.written, counter.read
	rec.Decision, rec.DurationMs = "allowed", time.Since(start).Milliseconds()
	b.record(rec)
}

var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

type countingConn struct {
	net.Conn
	read, written int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written += int64(n)
	return n, err
}

// Dialer returns a dial function for the host's own requests made on a
// sandbox's behalf (the run API's brokered fetch): each connection is
// decided, resolved, screened and pinned exactly as a proxied one, under
// policy, and recorded under name. A refusal is an error saying why.
func (p *Proxy) Dialer(ctx context.Context, name string, policy Policy) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	m, err := compilePolicy(ctx, policy)
	if err != nil {
		return nil, err
	}
	b := &Binding{p: p, sandbox: name, sem: make(chan struct{}, p.cfg.MaxConns), tunnels: map[*tunnel]struct{}{}, clients: map[net.Conn]struct{}{},
		tokens: float64(p.cfg.AuditBurst), refilled: time.Now()}
	b.policy.Store(m)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := splitHostPort(addr, 0)
		if err != nil {
			return nil, err
		}
		rec := Record{Time: time.Now(), Sandbox: name, Method: "FETCH", Host: host, Port: port}
		conn, ip, rule, err := b.dial(ctx, host, port)
		if err != nil {
			var r *refusal
			if errors.As(err, &r) {
				rec.Decision, rec.Reason, rec.Unlisted = "refused", r.reason, r.unlisted
				b.record(rec)
				return nil, fmt.Errorf("cordon egress refused %s: %s", net.JoinHostPort(host, strconv.Itoa(port)), r.reason)
			}
			return nil, err
		}
		rec.Decision, rec.Addr, rec.Rule = "allowed", ip.String(), rule
		b.record(rec)
		return conn, nil
	}, nil
}
