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

// port is an exposed port as the API gives it to r's caller.
func (s *Server) port(r *http.Request, p *exposed) api.Port {
	ap := api.Port{Port: p.port, URL: portURL(p.token), Token: p.token}
	if s.originsFor(r) {
		ap.OriginURL = s.portsURL.url(p.token)
	}
	return ap
}

// originsFor reports whether ports have origins of their own for r's
// caller: always under an operator's ports URL; under a loopback daemon's
// own, only for a caller on this host (names below localhost lead a
// browser elsewhere to its own machine).
func (s *Server) originsFor(r *http.Request) bool {
	if s.portsURL == nil {
		return false
	}
	if !s.portsURL.loopback {
		return true
	}
	switch a := r.Context().Value(http.LocalAddrContextKey).(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}

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
				writeJSON(w, http.StatusOK, s.port(r, p))
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
	writeJSON(w, http.StatusCreated, s.port(r, p))
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
			list.Ports = append(list.Ports, s.port(r, p))
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

// handlePortProxy serves /v1/ports/{token}/{path...}, the path form of an
// exposed port. A token that is not one (or whose sandbox is gone) is 404,
// as a missing page.
//
// Every port reached this way shares the daemon's one origin, so a
// browser would let the page of one exposed port read what another's left
// in its storage, set cookies for the others, or install a service worker
// over every URL of the daemon (each other port's, token included). So a
// browser's navigation here goes to the port's own origin where the
// daemon has one (PortsURL), and a page served here runs in an opaque
// origin of its own (a CSP sandbox) with its cookies held to its path.
func (s *Server) handlePortProxy(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	base := strings.TrimSuffix(portURL(token), "/")
	rest, _ := strings.CutPrefix(r.URL.EscapedPath(), base)
	if s.originsFor(r) && r.Header.Get("Sec-Fetch-Mode") == "navigate" && s.exposedPort(token) != nil {
		pu := *s.portsURL
		if _, port, err := net.SplitHostPort(r.Host); err == nil && pu.loopback {
			pu.port = port
		}
		to := strings.TrimSuffix(pu.url(token), "/") + "/" + strings.TrimPrefix(rest, "/")
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		w.Header().Set("Location", to)
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	s.proxyPort(w, r, token, rest, base)
}

// servePortHost serves a request to an exposed port's own origin (a host
// of PortsURL): the whole request goes to the port, path as it came.
func (s *Server) servePortHost(w http.ResponseWriter, r *http.Request, token string) {
	s.proxyPort(w, r, token, r.URL.EscapedPath(), "")
}

// exposedPort is the port exposed under token, or nil.
func (s *Server) exposedPort(token string) *exposed {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p *exposed
	for t, x := range s.ports {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			p = x
		}
	}
	return p
}

// proxyPort carries r to the port exposed under token, through the
// sandbox agent's tcp-connect, with path (escaped) as its path. pathForm
// is the path the port is served under on the daemon's own origin ("" on
// the port's own origin).
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, token, path, pathForm string) {
	p := s.exposedPort(token)
	var e *entry
	if p != nil {
		s.mu.Lock()
		e = s.live[p.sandbox]
		s.mu.Unlock()
	}
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
	raw := "/" + strings.TrimPrefix(path, "/")
	unescaped, err := url.PathUnescape(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "the path: "+err.Error())
		return
	}
	out := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port), Path: unescaped, RawPath: raw, RawQuery: r.URL.RawQuery}
	rp := &httputil.ReverseProxy{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return ac.DialTCP(ctx, port) },
			// One connection per request keeps the sandbox's agent from
			// holding idle ones for a caller that went away.
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: 5 * time.Minute,
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = out
			pr.Out.Host = pr.In.Host
			if pathForm != "" {
				// On the daemon's origin it may be the caller's API key,
				// sent with every request there; a port's own host has no
				// API, and what is sent there is the program's.
				pr.Out.Header.Del("Authorization")
			}
			pr.SetXForwarded()
		},
		ModifyResponse: func(resp *http.Response) error {
			confinePortAnswer(resp.Header, pathForm)
			return nil
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

// portSandboxCSP makes a page served on the daemon's own origin an opaque
// origin of its own: scripts, forms and popups work; its storage, cookies
// and service workers, which that origin shares with every other port's
// pages, are out of its reach.
const portSandboxCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// confinePortAnswer keeps a program's answer from reaching past its port:
// no cookie for a whole domain (every port's origin below it) nor, on the
// daemon's origin (pathForm, the port's path there), for another path; no
// service worker scope above the page's own; no clearing of what the
// browser holds for other origins; and on the daemon's origin, pages in a
// sandbox of their own (portSandboxCSP).
func confinePortAnswer(h http.Header, pathForm string) {
	h.Del("Service-Worker-Allowed")
	h.Del("Clear-Site-Data")
	if cookies := h.Values("Set-Cookie"); len(cookies) > 0 {
		h.Del("Set-Cookie")
		for _, c := range cookies {
			h.Add("Set-Cookie", confineCookie(c, pathForm))
		}
	}
	if pathForm != "" {
		h.Add("Content-Security-Policy", portSandboxCSP)
	}
}

// confineCookie is a Set-Cookie value with no Domain attribute (the cookie
// stays with the host that set it) and, where pathForm is set, its Path
// below pathForm.
func confineCookie(c, pathForm string) string {
	parts := strings.Split(c, ";")
	kept := parts[:1]
	for _, a := range parts[1:] {
		name, val, _ := strings.Cut(strings.TrimSpace(a), "=")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "domain":
			continue
		case "path":
			if pathForm != "" {
				a = " Path=" + pathForm + "/" + strings.TrimPrefix(strings.TrimSpace(val), "/")
			}
		}
		kept = append(kept, a)
	}
	return strings.Join(kept, ";")
}

// portsURL gives each exposed port an origin of its own: a host below one
// domain per port (a wildcard DNS name; below localhost, a loopback
// daemon's own), as E2B's and Modal's exposed ports have. A page there
// shares nothing with another port's, nor with the daemon's API.
type portsURL struct {
	scheme string
	domain string // the host's name below which each port has its label
	port   string // the port in the URLs given out ("": the scheme's)
	// loopback: the daemon's own default on a loopback listener, which
	// a browser may reach through another port (an SSH tunnel's): a
	// browser is sent on through the port it came by.
	loopback bool
}

// portLabel is a port's host label for its token (pt_HEX: pt-HEX, which a
// host name may hold).
func portLabel(token string) string { return strings.Replace(token, "_", "-", 1) }

// CheckPortsURL says what is wrong with a ports URL (Config.PortsURL).
func CheckPortsURL(s string) error {
	_, err := parsePortsURL(s)
	return err
}

// parsePortsURL reads a ports URL: http or https, a host whose first label
// is *, and nothing after it but "/". "http://*.localhost:8080" gives each
// port http://pt-….localhost:8080/.
func parsePortsURL(s string) (*portsURL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	domain, ok := strings.CutPrefix(strings.ToLower(u.Hostname()), "*.")
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: want http:// or https://", s)
	case !ok || domain == "" || strings.Contains(domain, "*"):
		return nil, fmt.Errorf("%q: want a host of the form *.DOMAIN (a wildcard name every port's host is below)", s)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%q: want only a scheme, *.DOMAIN and a port", s)
	}
	return &portsURL{scheme: u.Scheme, domain: domain, port: u.Port()}, nil
}

// url is the port's URL for token ("*": the pattern).
func (p *portsURL) url(token string) string {
	host := portLabel(token) + "." + p.domain
	if p.port != "" {
		host = net.JoinHostPort(host, p.port)
	}
	return p.scheme + "://" + host + "/"
}

// token reads a request's host: whether it is a port's (pt-… below the
// domain, where no API is served), and the token it names. Other names
// below the domain are the API's, so that it may share the domain.
func (p *portsURL) token(host string) (token string, port bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), "."+p.domain)
	if !ok {
		return "", false
	}
	hex, ok := strings.CutPrefix(label, "pt-")
	if !ok {
		return "", false
	}
	if strings.Contains(hex, ".") {
		return "", true
	}
	return "pt_" + hex, true
}
