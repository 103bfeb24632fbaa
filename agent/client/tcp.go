package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		resp.Body.Close()
		conn.Close()
		return nil, errorFrom(resp.StatusCode, b)
	}
	_ = conn.SetDeadline(time.Time{})
	return &upgraded{Conn: conn, r: br}, nil
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
