package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestRuleValidation(t *testing.T) {
	bad := []Rule{{Host: "*"}, {Host: "user:pw@example.com"}, {Host: "example.com/path"}, {Host: "http://example.com"},
		{Host: "example.com", Ports: []int{0}}, {Host: "example.com", Ports: []int{70000}}, {Host: "a.*.example.com"},
		{Host: "*.com"}, {Host: ""}, {Host: "0x7f000001"}, {Host: "example.com:443"},
		// No name resolves these: accepted, they would admit nothing.
		{Host: "a..test"}, {Host: ".a.test"}, {Host: "*..test"}, {Host: strings.Repeat("a", 64) + ".test"}, {Host: "a b.test"}, {Host: "a!.test"}}
	for _, r := range bad {
		if _, err := compile(r); err == nil {
			t.Errorf("rule %+v accepted", r)
		}
	}
	good := map[string]string{"Example.COM.": "example.com", "*.Example.com": "*.example.com", "bücher.example": "xn--bcher-kva.example",
		"192.0.2.1": "192.0.2.1", "10.0.0.0/8": "10.0.0.0/8", "2001:db8::/32": "2001:db8::/32", "::ffff:192.0.2.1": "192.0.2.1"}
	for in, want := range good {
		c, err := compile(Rule{Host: in})
		if err != nil || c.rule.Host != want {
			t.Errorf("rule %q: %v, %q; want %q", in, err, c.rule.Host, want)
		}
	}
	// A URL where a rule goes is refused saying the rule it meant.
	for in, says := range map[string]string{"http://a.test/x": "here a.test:80", "https://a.test": "here a.test:443"} {
		if _, err := ParseRule(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("rule %q: %v, want it refused saying %q", in, err, says)
		}
	}
	if err := (Profile{Name: "p", Hosts: []Rule{{Host: "*"}}}).Validate(); err == nil {
		t.Error("profile with a bare * accepted")
	}
	if err := (Profile{Hosts: []Rule{{Host: "a.example"}}}).Validate(); err == nil {
		t.Error("profile without a name accepted")
	}
}

func TestMatching(t *testing.T) {
	m, err := compilePolicy(context.Background(), Policy{Mode: Static, Rules: []Rule{
		{Host: "*.example.com"}, {Host: "api.test", Ports: []int{8443}}, {Host: "192.0.2.0/24", Ports: []int{80}}, {Host: "10.1.2.3", Ports: []int{80}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host string
		port int
		want bool
	}{
		{"a.example.com", 443, true}, {"a.b.example.com", 80, true}, {"example.com", 443, false}, {"evilexample.com", 443, false},
		{"a.example.com", 8080, false}, {"api.test", 8443, true}, {"api.test", 443, false}, {"192.0.2.9", 80, true},
		{"192.0.2.9", 443, false}, {"10.1.2.3", 80, true}, {"10.1.2.4", 80, false}, {"0xc0000209", 80, true}, {"3221225993", 80, true},
	}
	for _, c := range cases {
		if _, got := m.hostAllowed(c.host, c.port); got != c.want {
			t.Errorf("%s:%d allowed=%v, want %v", c.host, c.port, got, c.want)
		}
	}
	// A name rule never reaches special addresses; an address rule does.
	for _, ip := range []string{"169.254.169.254", "10.0.0.1", "127.0.0.1", "::ffff:127.0.0.1", "fd00::1", "100.64.0.1", "::1", "64:ff9b::a00:1", "0.0.0.0", "224.0.0.1"} {
		if _, ok := m.addrAllowed(netip.MustParseAddr(ip), 443); ok {
			t.Errorf("%s reachable through a name rule", ip)
		}
	}
	if _, ok := m.addrAllowed(netip.MustParseAddr("10.1.2.3"), 80); !ok {
		t.Error("an address rule must admit its private address")
	}
	if _, ok := m.addrAllowed(netip.MustParseAddr("203.0.113.5"), 443); !ok {
		t.Error("an ordinary address refused")
	}
	// An address rule reaches a special address only by naming its range:
	// 0.0.0.0/0 is the Internet, not the host's loopback, and a link-local
	// rule is not the metadata service's.
	broad, err := compilePolicy(context.Background(), Policy{Mode: Static, Rules: []Rule{
		{Host: "0.0.0.0/0", Ports: []int{8080}}, {Host: "169.254.0.0/16", Ports: []int{8080}}, {Host: "10.0.0.0/8", Ports: []int{8080}},
		{Host: "127.0.0.1", Ports: []int{8080}}, {Host: "2000::/3", Ports: []int{8080}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]bool{
		"203.0.113.5": true, "10.9.9.9": true, "169.254.1.1": true, "127.0.0.1": true, "::ffff:203.0.113.5": true, "2001:db8::1": true,
		"127.0.0.2": false, "0.0.0.0": false, "169.254.169.254": false, "172.16.0.1": false, "192.168.1.1": false, "100.64.0.1": false,
		"::ffff:127.0.0.2": false, "2002:7f00:1::": false, "2001::1": false,
	} {
		if _, ok := broad.hostAllowed(ip, 8080); ok != want {
			t.Errorf("%s literal allowed=%v, want %v", ip, ok, want)
		}
		if _, ok := broad.addrAllowed(netip.MustParseAddr(ip), 8080); ok != want {
			t.Errorf("%s resolved allowed=%v, want %v", ip, ok, want)
		}
	}
	for rule, want := range map[string]string{"10.0.0.0/8": "private", "10.1.2.3": "private", "169.254.169.254": "cloud metadata", "127.0.0.0/8": "loopback",
		"0.0.0.0/0": "", "192.0.2.0/24": "", "api.test": "", "10.0.0.0/7": ""} {
		if got := NamesSpecial(Rule{Host: rule}); got != want {
			t.Errorf("NamesSpecial(%s) = %q, want %q", rule, got, want)
		}
	}
	deny, _ := compilePolicy(context.Background(), Policy{})
	if _, ok := deny.hostAllowed("a.example.com", 443); ok {
		t.Error("the default policy allowed something")
	}
	empty, _ := compilePolicy(context.Background(), Policy{Mode: Static})
	if _, ok := empty.hostAllowed("a.example.com", 443); ok {
		t.Error("an empty allowlist allowed something")
	}
}

func TestInetAton(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1": "127.0.0.1", "2130706433": "127.0.0.1", "0x7f000001": "127.0.0.1", "0177.0.0.1": "127.0.0.1",
		"127.1": "127.0.0.1", "127.0.1": "127.0.0.1", "0x7f.1": "127.0.0.1", "0": "0.0.0.0", "169.254.43518": "169.254.169.254",
	} {
		got, ok := parseInetAton(in)
		if !ok || got.String() != want {
			t.Errorf("%q = %v %v, want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{"example.com", "1.2.3.4.5", "256.1.1.1", "0x", "08", "1.2.3.256", "a1"} {
		if got, ok := parseInetAton(in); ok && in != "0x" {
			t.Errorf("%q parsed as %v", in, got)
		}
	}
}

// clientHello is the first flight of a crypto/tls client dialling
// serverName ("" for none): a real ClientHello.
func clientHello(tb testing.TB, serverName string) []byte {
	tb.Helper()
	c1, c2 := net.Pipe()
	go func() {
		_ = tls.Client(c1, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	}()
	buf := make([]byte, 8192)
	n, err := c2.Read(buf)
	c1.Close()
	c2.Close()
	if err != nil {
		tb.Fatal(err)
	}
	return buf[:n]
}

func TestSNI(t *testing.T) {
	hello := clientHello(t, "api.example.com")
	sni, err := readSNI(bufio.NewReader(bytes.NewReader(hello)))
	if err != nil || sni != "api.example.com" {
		t.Fatalf("sni %q err %v", sni, err)
	}
	if _, err := readSNI(bufio.NewReader(bytes.NewReader(hello[:len(hello)/2]))); err == nil {
		t.Fatal("a truncated ClientHello was accepted")
	}
	// A handshake record that is no ClientHello is refused; a ClientHello
	// without a name (a client dialling an address) has none.
	if _, err := readSNI(bufio.NewReader(bytes.NewReader([]byte("\x16\x03\x01\x00\x05hello")))); err == nil {
		t.Fatal("a handshake record that is no ClientHello was read")
	}
	if sni, err := readSNI(bufio.NewReader(bytes.NewReader(clientHello(t, "")))); err != nil || sni != "" {
		t.Fatalf("a ClientHello without a name: %q %v", sni, err)
	}
}

// TestResolverPolicy: a resolver is asked when the policy is set and on
// every change, and its rules are validated like static ones.
func TestResolverPolicy(t *testing.T) {
	asked := 0
	rules := []Rule{{Host: "first.test"}}
	pol := Policy{Mode: Dynamic, Resolver: func(ctx context.Context) ([]Rule, error) {
		asked++
		return rules, nil
	}}
	ln, err := net.Listen("unix", t.TempDir()+"/e.sock")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{}).Attach(context.Background(), "s", ln, pol)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, ok := b.policy.Load().hostAllowed("first.test", 443); !ok || asked != 1 {
		t.Fatalf("after attach: asked %d", asked)
	}
	rules = []Rule{{Host: "second.test"}}
	if err := b.SetPolicy(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
	m := b.policy.Load()
	if _, ok := m.hostAllowed("first.test", 443); ok || asked != 2 {
		t.Fatalf("after change: first still allowed, asked %d", asked)
	}
	if _, ok := m.hostAllowed("second.test", 443); !ok {
		t.Fatal("the resolver's new rule is not in force")
	}
	rules = []Rule{{Host: "*"}}
	if err := b.SetPolicy(context.Background(), pol); err == nil {
		t.Fatal("a resolver's malformed rule was accepted")
	}
	if _, ok := b.policy.Load().hostAllowed("second.test", 443); !ok {
		t.Fatal("a refused change replaced the policy in force")
	}
}

// TestWithin: a rule is within a list when one of the list's rules covers
// its host, as a policy reads both, on every port it names.
func TestWithin(t *testing.T) {
	ceiling := []Rule{{Host: "api.example.test", Ports: []int{443}}, {Host: "*.cdn.example.test"}, {Host: "192.0.2.0/24", Ports: []int{8080}}}
	for s, want := range map[string]bool{
		"api.example.test:443":   true,
		"API.Example.Test.:443":  true,
		"api.example.test":       false, // 80 and 443
		"api.example.test:8443":  false,
		"other.example.test:443": false,
		"*.cdn.example.test":     true,
		"*.cdn.example.test:443": true,
		"x.cdn.example.test":     true,
		"*.a.cdn.example.test":   true,
		"cdn.example.test":       false, // a wildcard names what is under it only
		"*.example.test":         false,
		"192.0.2.0/24:8080":      true,
		"192.0.2.7:8080":         true,
		"192.0.2.7:80":           false,
		"192.0.0.0/16:8080":      false,
		"198.51.100.1:8080":      false,
	} {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if got := r.Within(ceiling); got != want {
			t.Errorf("%s within the ceiling: %v, want %v", s, got, want)
		}
	}
}
