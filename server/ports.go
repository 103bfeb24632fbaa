package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
)

// Exposed ports: a sandbox's port reached at a URL of the daemon whose own
// token is the credential (a link to share for one port of one sandbox,
// not a key to everything a tenant has). They live in the daemon's memory:
// a restart revokes them, and the sandbox's owner exposes them again.

type exposed struct {
	sandbox string
	port    int
	token   string
}

// maxPortConns bounds the connections open to one sandbox's exposed ports
// (the agent serves 1024 at most, its host's included).
const maxPortConns = 256

func newPortToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "pt_" + hex.EncodeToString(b[:])
}

func portURL(token string) string { return "/v1/ports/" + token + "/" }

func (s *Server) handleExposePort(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	var req api.PortRequest
	if !readJSON(w, r, 4<<10, &req) {
		return
	}
	if req.Port < 1 || req.Port > 65535 {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "port: want 1 to 65535")
		return
	}
	if !e.sb.HasFeature("tcp-connect") {
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, "this sandbox's agent cannot reach its ports (no tcp-connect)")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.ports {
		if p.sandbox == e.rec.ID {
			if p.port == req.Port {
				writeJSON(w, http.StatusOK, api.Port{Port: p.port, URL: portURL(p.token), Token: p.token})
				return
			}
			n++
		}
	}
	if n >= api.MaxPorts {
		writeError(w, http.StatusTooManyRequests, api.CodeQuota, fmt.Sprintf("at most %d ports per sandbox; revoke one (DELETE .../ports/PORT)", api.MaxPorts))
		return
	}
	p := &exposed{sandbox: e.rec.ID, port: req.Port, token: newPortToken()}
	s.ports[p.token] = p
	writeJSON(w, http.StatusCreated, api.Port{Port: p.port, URL: portURL(p.token), Token: p.token})
}

func (s *Server) handleListPorts(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	list := api.PortList{Ports: []api.Port{}}
	s.mu.Lock()
	for _, p := range s.ports {
		if p.sandbox == e.rec.ID {
			list.Ports = append(list.Ports, api.Port{Port: p.port, URL: portURL(p.token), Token: p.token})
		}
	}
	s.mu.Unlock()
	sort.Slice(list.Ports, func(i, j int) bool { return list.Ports[i].Port < list.Ports[j].Port })
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleRevokePort(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "port: want 1 to 65535")
		return
	}
	s.mu.Lock()
	for t, p := range s.ports {
		if p.sandbox == e.rec.ID && p.port == port {
			delete(s.ports, t)
		}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// dropPortsLocked revokes a sandbox's ports (it is gone).
func (s *Server) dropPortsLocked(id string) {
	for t, p := range s.ports {
		if p.sandbox == id {
			delete(s.ports, t)
		}
	}
}

// handlePortProxy serves /v1/ports/{token}/{path...}: HTTP and WebSocket to
// the exposed port, through the sandbox agent's tcp-connect. A token that
// is not one (or whose sandbox is gone) is 404, as a missing page.
func (s *Server) handlePortProxy(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	s.mu.Lock()
	var p *exposed
	for t, x := range s.ports {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			p = x
		}
	}
	var e *entry
	if p != nil {
		e = s.live[p.sandbox]
	}
	s.mu.Unlock()
	if p == nil || e == nil || e.sb == nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such port")
		return
	}
	e.touch()
	// Whoever holds the link may connect, but not so often that the
	// sandbox's agent, which carries each connection, has no room left for
	// the daemon's own requests.
	select {
	case e.portConns <- struct{}{}:
		defer func() { <-e.portConns }()
	default:
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, fmt.Sprintf("at most %d connections to a sandbox's exposed ports at once", maxPortConns))
		return
	}
	ac := e.sb.Client()
	port := p.port
	rp := &httputil.ReverseProxy{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return ac.DialTCP(ctx, port) },
			// One connection per request keeps the sandbox's agent from
			// holding idle ones for a caller that went away.
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: 5 * time.Minute,
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port), Path: "/" + strings.TrimPrefix(r.PathValue("path"), "/"), RawQuery: r.URL.RawQuery}
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del("Authorization")
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return
			}
			writeError(w, http.StatusBadGateway, api.CodeAgent, fmt.Sprintf("nothing answered on the sandbox's port %d: %v", port, err))
		},
	}
	rp.ServeHTTP(w, r)
}
