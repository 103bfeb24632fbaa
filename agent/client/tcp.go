package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// DialTCP opens a byte stream to port on the sandbox's own loopback
// (feature "tcp-connect"): the connection to the agent (or its gateway),
// taken over once the agent has connected. CloseWrite half-closes it.
func (c *Client) DialTCP(ctx context.Context, port int) (net.Conn, error) {
	u, err := url.Parse(c.base)
	if err != nil {
		return nil, err
	}
	conn, err := c.dialAgent(ctx, u)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	path := strings.TrimSuffix(u.Path, "/") + wire.RouteTCP + "?port=" + strconv.Itoa(port)
	// Straight to the agent over its unix socket, the host may share the
	// sandbox's kernel: the agent then hands the connected socket over
	// (feature "tcp-pass") and relays nothing. Through a gateway, never.
	uc, direct := conn.(*net.UnixConn)
	if direct && c.ep.Network == "unix" {
		path += "&pass=1"
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+u.Host+path, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.UpgradeTCP)
	c.auth(req)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	var head io.Reader = conn
	var fds []int
	if direct && c.ep.Network == "unix" {
		// The socket, when it comes, comes with the answer's first bytes:
		// they are read with their control message.
		got, passed, err := readHeadWithRights(uc)
		if err != nil {
			conn.Close()
			return nil, err
		}
		fds = passed
		head = io.MultiReader(bytes.NewReader(got), conn)
	}
	closeFDs := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	br := bufio.NewReader(head)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		closeFDs()
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		closeFDs()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		resp.Body.Close()
		conn.Close()
		return nil, errorFrom(resp.StatusCode, b)
	}
	if resp.Header.Get(wire.PassHeader) == "1" {
		conn.Close()
		if len(fds) != 1 {
			closeFDs()
			return nil, fmt.Errorf("the agent said it passed the socket, and passed %d descriptors", len(fds))
		}
		f := os.NewFile(uintptr(fds[0]), "tcp")
		defer f.Close()
		tc, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		if _, ok := tc.(*net.TCPConn); !ok {
			tc.Close()
			return nil, errors.New("the agent passed something other than a TCP connection")
		}
		return tc, nil
	}
	closeFDs()
	_ = conn.SetDeadline(time.Time{})
	return &upgraded{Conn: conn, r: br}, nil
}

// readHeadWithRights reads from uc until an HTTP answer's head is whole,
// collecting the descriptors that came with it.
func readHeadWithRights(uc *net.UnixConn) ([]byte, []int, error) {
	var head []byte
	var fds []int
	buf := make([]byte, 4096)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for !bytes.Contains(head, []byte("\r\n\r\n")) {
		if len(head) > 64<<10 {
			break
		}
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for _, m := range msgs {
					if rights, rerr := syscall.ParseUnixRights(&m); rerr == nil {
						fds = append(fds, rights...)
					}
				}
			}
		}
		head = append(head, buf[:n]...)
		if err != nil {
			if len(head) > 0 && err == io.EOF {
				break
			}
			for _, fd := range fds {
				syscall.Close(fd)
			}
			return nil, nil, err
		}
	}
	return head, fds, nil
}

// dialAgent opens a connection to where c's requests go: through its
// transport's dialer where it has one (a unix socket), else over TCP.
func (c *Client) dialAgent(ctx context.Context, u *url.URL) (net.Conn, error) {
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	tr, _ := c.hc.Transport.(*http.Transport)
	dial := (&net.Dialer{}).DialContext
	if tr != nil && tr.DialContext != nil {
		dial = tr.DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil || u.Scheme != "https" {
		return conn, err
	}
	return tlsClient(ctx, conn, u, tr)
}

func tlsClient(ctx context.Context, conn net.Conn, u *url.URL, tr *http.Transport) (net.Conn, error) {
	cfg := &tls.Config{ServerName: u.Hostname()}
	if tr != nil && tr.TLSClientConfig != nil {
		cfg = tr.TLSClientConfig.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS to %s: %w", u.Host, err)
	}
	return tc, nil
}

// upgraded is the taken-over connection: what the answer's reader already
// holds comes first.
// Resumed is conn read through r first: a connection taken over from an
// HTTP server (its buffered reader may hold the stream's first bytes).
// CloseWrite half-closes conn.
func Resumed(conn net.Conn, r *bufio.Reader) net.Conn { return &upgraded{Conn: conn, r: r} }

// Splice copies between a and b both ways until both directions end,
// passing each end on as a half-close (a full close where a connection
// cannot half-close).
func Splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
}

type upgraded struct {
	net.Conn
	r *bufio.Reader
}

func (u *upgraded) Read(p []byte) (int, error) { return u.r.Read(p) }

// CloseWrite half-closes the stream: the program in the sandbox reads its
// end.
func (u *upgraded) CloseWrite() error {
	if cw, ok := u.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("this connection cannot half-close")
}

// Watch streams the changes under a directory (feature "watch") to fn
// until ctx ends, fn fails or the directory goes; the first event is
// "ready", once the watch is in place.
func (c *Client) Watch(ctx context.Context, path string, recursive bool, fn func(wire.WatchEvent) error) error {
	route := wire.RouteWatch + "?path=" + url.QueryEscape(path)
	if recursive {
		route += "&recursive=1"
	}
	resp, err := c.do(ctx, http.MethodGet, route, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return errorFrom(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev wire.WatchEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("agent sent a malformed watch event: %w", err)
		}
		if ev.Type == "heartbeat" {
			continue
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}
