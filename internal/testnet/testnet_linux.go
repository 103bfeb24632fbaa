// Package testnet makes network namespaces for tests: a private network
// with documentation-range addresses on its loopback, where test servers
// listen and the egress proxy dials. Nothing touches the host's network.
package testnet

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// This thread enters the namespace and is never unlocked, so the
		// runtime discards it afterwards.
		runtime.LockOSThread()
		f, err := os.Open(n.Path)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listen %s in %s: %v", addr, n.Name, r.err)
	}
	t.Cleanup(func() { r.ln.Close() })
	return r.ln
}
