// Package testnet makes network namespaces for tests: a private network
// with documentation-range addresses on its loopback, where test servers
// listen and the egress proxy dials. Nothing touches the host's network.
package testnet

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/netns"
	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// Net is one test network namespace.
type Net struct {
	Name string
	Path string
}

// New creates a namespace with lo up and each address on it.
func New(t testing.TB, addrs ...string) *Net {
	t.Helper()
	testutil.RequiresRoot(t)
	testutil.Requires(t, "ip")
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := &Net{Name: "cordon-test-" + hex.EncodeToString(b[:])}
	n.Path = "/run/netns/" + n.Name
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", n.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.Name).Run() })
	ip("-n", n.Name, "link", "set", "lo", "up")
	for _, a := range addrs {
		bits := "/32"
		if strings.Contains(a, ":") {
			bits = "/128"
		}
		ip("-n", n.Name, "addr", "add", a+bits, "dev", "lo")
	}
	return n
}

// Listen opens a TCP listener inside the namespace.
func (n *Net) Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := netns.Do(n.Path, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, n.Name, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
