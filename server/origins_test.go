package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestOriginsFor: a loopback daemon's own ports URL (http://*.localhost:PORT)
// is given, and browsers sent to it, only for callers on this host; one
// through another listener of the daemon's, from another machine, would be
// led to its own. An operator's ports URL holds for every caller.
func TestOriginsFor(t *testing.T) {
	at := func(addr net.Addr) *http.Request {
		r := httptest.NewRequest("GET", "/v1/ports/pt_x/", nil)
		return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, addr))
	}
	remote := at(&net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 8080})
	for _, c := range []struct {
		name string
		url  *portsURL
		r    *http.Request
		want bool
	}{
		{"none", nil, at(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}), false},
		{"loopback, from loopback", &portsURL{scheme: "http", domain: "localhost", port: "8080", loopback: true}, at(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}), true},
		{"loopback, from ::1", &portsURL{scheme: "http", domain: "localhost", port: "8080", loopback: true}, at(&net.TCPAddr{IP: net.IPv6loopback}), true},
		{"loopback, on the unix socket", &portsURL{scheme: "http", domain: "localhost", port: "8080", loopback: true}, at(&net.UnixAddr{Name: "/run/cordon.sock", Net: "unix"}), true},
		{"loopback, from elsewhere", &portsURL{scheme: "http", domain: "localhost", port: "8080", loopback: true}, remote, false},
		{"the operator's, from elsewhere", &portsURL{scheme: "https", domain: "ports.example.test"}, remote, true},
	} {
		if got := (&Server{portsURL: c.url}).originsFor(c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
