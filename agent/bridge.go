//go:build linux

package agent

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// MaxEgressConnections bounds the bridge's simultaneous connections.
const MaxEgressConnections = 512

// withProxyEnv replaces any proxy settings in env with the bridge's.
func withProxyEnv(env []string, listen string) []string {
	out := make([]string, 0, len(env)+7)
	node := false
	for _, kv := range env {
		switch name := kv[:max(0, strings.IndexByte(kv, '='))]; strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY":
			continue
		case "NODE_USE_ENV_PROXY":
			node = true
		}
		out = append(out, kv)
	}
	out = append(out, proxyEnv(listen)...)
	if !node {
		// Node.js's fetch and http (22.21 and later) take the proxy from
		// the environment only when told to; a sandbox's env may say
		// otherwise.
		out = append(out, "NODE_USE_ENV_PROXY=1")
	}
	return out
}

// proxyEnv points commands at the egress bridge. A program that ignores it
// has no route anywhere: the sandbox's network has loopback only.
func proxyEnv(listen string) []string {
	u := "http://" + listen
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
}

// serveEgressBridge takes each connection to listen to the host's egress
// proxy over its unix socket. The proxy knows the sandbox by the socket,
// so nothing is added in band. Where the sandbox shares the host's kernel
// (pass), the connection itself is handed to the proxy (wire.EgressPass),
// which then carries its bytes with no hop through the agent; elsewhere,
// or should the handing fail, the bridge carries them unchanged.
func (s *Server) serveEgressBridge(ln net.Listener, socket string, pass bool) {
	sem := make(chan struct{}, MaxEgressConnections)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close()
			continue
		}
		go func() {
			defer func() { <-sem }()
			defer c.Close()
			up, err := net.DialTimeout("unix", socket, 5*time.Second)
			if err != nil {
				io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\ncordon egress: the host's egress proxy is unreachable\n")
				return
			}
			defer up.Close()
			if pass && passConn(up.(*net.UnixConn), c.(*net.TCPConn)) == nil {
				return
			}
			done := make(chan struct{}, 2)
			go func() { io.Copy(up, c); up.(*net.UnixConn).CloseWrite(); done <- struct{}{} }()
			go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

// passConn sends c to the proxy on up. The proxy holds its own reference
// to the connection once the message is sent, so closing ours leaves it
// open.
func passConn(up *net.UnixConn, c *net.TCPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = up.WriteMsgUnix([]byte{wire.EgressPass}, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}
