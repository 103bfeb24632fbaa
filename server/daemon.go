package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// DaemonConfig is a whole daemon's life: the server, where it listens, and
// what it releases at the end.
type DaemonConfig struct {
	Server Config
	// Listen are the addresses served: unix:///path (mode 0600; a request
	// there without a key acts as the local administrator) or
	// tcp://host:port (which needs API keys, and takes TLS with TLSCert
	// and TLSKey).
	Listen          []string
	TLSCert, TLSKey string
	// AdminKey, when set, is installed as the admin API key.
	AdminKey string
	// Backends are closed at the end (sandbox.Closer: their started inits
	// go); their sandboxes stay, for the next daemon to take back.
	Backends []sandbox.Backend
	// Started, when set, is called with the server once it exists, before
	// it serves (to route the egress proxy's records to its events).
	Started func(*Server)
	// Ephemeral destroys every sandbox when the daemon stops: a private
	// daemon (cordon mcp's) whose sandboxes must not outlive it.
	Ephemeral bool
}

// Shutdown grace: open requests get ShutdownGrace to finish once the
// daemon stops listening; the server's own shutdown then gets
// closeGrace.
const (
	ShutdownGrace = 10 * time.Second
	closeGrace    = 30 * time.Second
)

// RunDaemon serves until ctx ends (a signal, for cordon serve) or a
// listener fails, then stops listening, gives open requests ShutdownGrace,
// ends event streams, shuts the server down and closes the backends.
// Sandboxes keep running throughout: the next daemon takes them back. It
// returns the listener's error, or nil after ctx ended.
func RunDaemon(ctx context.Context, cfg DaemonConfig) error {
	srv, err := New(cfg.Server)
	if err != nil {
		return err
	}
	if cfg.Started != nil {
		cfg.Started(srv)
	}
	log := srv.log
	release := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeGrace)
		defer cancel()
		if cfg.Ephemeral {
			_ = srv.Close(sctx)
		} else {
			_ = srv.Shutdown(sctx)
		}
		for _, b := range cfg.Backends {
			if c, ok := b.(sandbox.Closer); ok {
				_ = c.Close()
			}
		}
	}
	if cfg.AdminKey != "" {
		if _, err := srv.AddKey(cfg.AdminKey, "admin", "admin (--admin-key-file)", true); err != nil {
			release()
			return fmt.Errorf("admin key: %w", err)
		}
	}
	var servers []*http.Server
	stopAll := func(ctx context.Context) {
		for _, hs := range servers {
			if err := hs.Shutdown(ctx); err != nil {
				hs.Close()
			}
		}
	}
	errc := make(chan error, len(cfg.Listen))
	lns := make([]net.Listener, 0, len(cfg.Listen))
	for _, addr := range cfg.Listen {
		ln, err := Listen(addr, srv.HasKeys(), cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			release()
			return fmt.Errorf("%s: %w", addr, err)
		}
		lns = append(lns, ln)
	}
	if srv.portsURL == nil {
		srv.portsURL = loopbackPortsURL(lns, cfg.TLSCert != "")
	}
	if srv.portsURL != nil {
		log.Info("exposed ports have origins of their own", "url", srv.portsURL.url("*"))
	}
	for i, ln := range lns {
		addr := cfg.Listen[i]
		hs := &http.Server{
			Handler: srv.Handler(), ConnContext: LocalConnContext,
			ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, IdleTimeout: 2 * time.Minute,
		}
		// Event streams never end by themselves: a shutdown ends them at
		// once rather than waiting out its grace for them.
		hs.RegisterOnShutdown(srv.EndStreams)
		servers = append(servers, hs)
		go func() { errc <- hs.Serve(ln) }()
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && strings.HasSuffix(addr, ":0") {
			addr = strings.TrimSuffix(addr, "0") + strconv.Itoa(tcp.Port) // the port it was given
		}
		log.Info("listening", "addr", addr)
		if exposedInClear(addr, ln, cfg.TLSCert != "") {
			log.Warn("this listener takes API keys in clear text from beyond this host: give --tls-cert and --tls-key, or listen on loopback behind a proxy that terminates TLS", "addr", addr)
		}
	}
	var failed error
	select {
	case <-ctx.Done():
		if cfg.Ephemeral {
			log.Info("shutting down; destroying every sandbox (--ephemeral)", "cause", context.Cause(ctx))
		} else {
			log.Info("shutting down; sandboxes stay running", "cause", context.Cause(ctx))
		}
	case failed = <-errc:
		log.Error("listener failed", "err", failed)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
	defer cancel()
	stopAll(sctx)
	release()
	return failed
}

// loopbackPortsURL is the ports URL of a daemon with a plain TCP listener
// on loopback: http://*.localhost:PORT, which every browser reaches there
// (RFC 6761 keeps names below localhost for loopback). nil without one.
func loopbackPortsURL(lns []net.Listener, withTLS bool) *portsURL {
	if withTLS {
		return nil // a certificate for *.localhost is not to be expected
	}
	for _, ln := range lns {
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
			return &portsURL{scheme: "http", domain: "localhost", port: strconv.Itoa(tcp.Port), loopback: true}
		}
	}
	return nil
}

// exposedInClear reports whether ln, opened for addr, is TCP without TLS
// on an address other hosts may reach (not loopback).
func exposedInClear(addr string, ln net.Listener, withTLS bool) bool {
	tcp, ok := ln.Addr().(*net.TCPAddr)
	return ok && !withTLS && strings.HasPrefix(addr, "tcp://") && !tcp.IP.IsLoopback()
}

// Listen opens one listener: a unix socket with mode 0600 (removing a
// stale one no daemon answers on), or TCP, which needs keys and takes TLS.
func Listen(addr string, haveKeys bool, cert, key string) (net.Listener, error) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		path := strings.TrimPrefix(addr, "unix://")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, errors.New("another daemon is listening there")
		}
		_ = os.Remove(path)
		old := syscall.Umask(0o177)
		ln, err := net.Listen("unix", path)
		syscall.Umask(old)
		return ln, err
	case strings.HasPrefix(addr, "tcp://"):
		if !haveKeys {
			return nil, errors.New("a TCP listener needs API keys: give --admin-key-file (the unix socket needs none)")
		}
		ln, err := net.Listen("tcp", strings.TrimPrefix(addr, "tcp://"))
		if err != nil || cert == "" {
			return ln, err
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			ln.Close()
			return nil, err
		}
		return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}), nil
	}
	return nil, fmt.Errorf("want unix:///path or tcp://host:port")
}
