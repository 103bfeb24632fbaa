package server

import (
	"net"
	"testing"
)

// TestExposedInClear: a TCP listener without TLS on an address beyond
// loopback is what the daemon warns of; loopback, TLS and unix sockets are
// not.
func TestExposedInClear(t *testing.T) {
	listen := func(network, addr string) net.Listener {
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	all := listen("tcp", "0.0.0.0:0")
	lo := listen("tcp", "127.0.0.1:0")
	unix := listen("unix", t.TempDir()+"/s.sock")
	for _, c := range []struct {
		addr    string
		ln      net.Listener
		withTLS bool
		want    bool
	}{
		{"tcp://0.0.0.0:0", all, false, true},
		{"tcp://0.0.0.0:0", all, true, false},
		{"tcp://127.0.0.1:0", lo, false, false},
		{"unix:///s.sock", unix, false, false},
	} {
		if got := exposedInClear(c.addr, c.ln, c.withTLS); got != c.want {
			t.Errorf("%s (TLS %v): %v, want %v", c.addr, c.withTLS, got, c.want)
		}
	}
}
