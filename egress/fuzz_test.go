package egress

import (
	"bufio"
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
)

// FuzzMatch: a wildcard never matches its apex or a look-alike, and no host
// that parses as an address is ever matched by a name rule.
func FuzzMatch(f *testing.F) {
	for _, s := range []string{"a.example.com", "example.com", "evilexample.com", "127.1", "0x7f000001", "[::1]", "A.EXAMPLE.COM", "xn--bcher-kva.example", "..example.com"} {
		f.Add(s, 443)
	}
	m, _ := compilePolicy(context.Background(), Policy{Mode: Static, Rules: []Rule{{Host: "*.example.com"}, {Host: "api.test"}}})
	f.Fuzz(func(t *testing.T, host string, port int) {
		rule, ok := m.hostAllowed(host, port)
		if !ok {
			return
		}
		if _, lit := literalIP(host); lit {
			t.Fatalf("address %q matched name rule %q", host, rule)
		}
		if rule == "*.example.com" && (!strings.HasSuffix(host, ".example.com") || host == "example.com") {
			t.Fatalf("%q matched %q", host, rule)
		}
		if port != 80 && port != 443 {
			t.Fatalf("port %d allowed by a rule with default ports", port)
		}
	})
}

// FuzzScreen: every address in a special range is refused, and an
// IPv4-mapped address is never judged more kindly than the address inside.
func FuzzScreen(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:10.0.0.1", "203.0.113.9", "fe80::1", "169.254.169.254", "2002:a00:1::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			if a, ok := parseInetAton(s); ok {
				ip = a
			} else {
				return
			}
		}
		why := Screen(ip)
		for _, sp := range special {
			if sp.prefix.Contains(ip) && why == "" {
				t.Fatalf("%s in %s passed the screen", ip, sp.prefix)
			}
		}
		if ip.Is4In6() && why == "" {
			t.Fatalf("mapped %s passed", ip)
		}
	})
}

// FuzzSNI: the ClientHello parser never panics or reads past its input.
func FuzzSNI(f *testing.F) {
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = readSNI(bufio.NewReader(bytes.NewReader(b)))
	})
}
