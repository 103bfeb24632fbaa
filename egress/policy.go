// Package egress is cordon's egress boundary: one policy type for every
// tier, enforced by a host-side proxy that is a sandbox's only way out.
// A sandbox's network namespace has loopback only; the agent bridges
// 127.0.0.1:3128 inside to this proxy, which resolves names itself, screens
// every address, dials exactly the address it screened, and records every
// decision.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/net/idna"

	"github.com/cordon-sandbox/cordon/internal/hostname"
)

// Mode is the kind of policy.
type Mode string

const (
	DenyAll  Mode = "deny-all"  // the default: nothing leaves
	AllowAll Mode = "allow-all" // tests and explicit trust; private ranges stay refused
	Static   Mode = "static"    // the rules given
	Dynamic  Mode = "resolver"  // rules from a host function, asked at create and on every change
)

// Rule admits one host (exact name, "*.suffix", IP or CIDR literal) on the
// listed ports (80 and 443 when none are listed).
type Rule struct {
	Host  string `json:"host"`
	Ports []int  `json:"ports,omitempty"`
}

// Profile is a named, reusable set of rules.
type Profile struct {
	Name  string `json:"name"`
	Hosts []Rule `json:"hosts"`
}

// Resolver supplies rules for a sandbox; it is called when the policy is
// set and on every change.
type Resolver func(ctx context.Context) ([]Rule, error)

// Policy is what a sandbox may reach.
type Policy struct {
	Mode     Mode
	Rules    []Rule
	Resolver Resolver
}

// ErrInvalid marks a malformed policy, profile or rule.
var ErrInvalid = errors.New("invalid egress rule")

// DefaultPorts are a rule's ports when it names none.
var DefaultPorts = []int{80, 443}

// compiled is a validated rule.
type compiled struct {
	rule   Rule   // normalised
	name   string // exact name, or the suffix after "*." when wildcard
	wild   bool
	prefix netip.Prefix // for IP and CIDR rules
	isAddr bool
	ports  map[int]bool
}

// NormalizeHost lower-cases a name, drops a trailing dot and converts
// internationalised names to punycode.
func NormalizeHost(h string) (string, error) {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	if h == "" {
		return "", fmt.Errorf("%w: empty host", ErrInvalid)
	}
	a, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", fmt.Errorf("%w: host %q: %v", ErrInvalid, h, err)
	}
	// The profile lets empty labels through ("a..test"), which no name
	// resolves: such a rule would be accepted and admit nothing.
	if !hostname.Valid(a) {
		return "", fmt.Errorf("%w: host %q is no host name (at most 253 bytes; each dot-separated label is 1 to 63 letters, digits or '-')", ErrInvalid, h)
	}
	return a, nil
}

// Rules is a repeatable command-line flag of rules (flag.Value): each Set
// parses one, as ParseRule does.
type Rules []Rule

func (rs *Rules) String() string { return "" }

// Set adds the rule s spells.
func (rs *Rules) Set(s string) error {
	r, err := ParseRule(s)
	if err != nil {
		return err
	}
	*rs = append(*rs, r)
	return nil
}

// Within reports whether r admits nothing that rules do not: one of rules
// covers its host (the same name; a name, or a narrower wildcard, under a
// *.suffix; an address or a narrower CIDR inside a CIDR), on every port r
// names. A rule that does not compile is within nothing.
func (r Rule) Within(rules []Rule) bool {
	c, err := compile(r)
	if err != nil {
		return false
	}
	for _, o := range rules {
		oc, err := compile(o)
		if err != nil || !oc.covers(c) {
			continue
		}
		all := true
		for p := range c.ports {
			all = all && oc.ports[p]
		}
		if all {
			return true
		}
	}
	return false
}

// covers reports whether every host c names, o names too.
func (o *compiled) covers(c *compiled) bool {
	switch {
	case o.isAddr || c.isAddr:
		return o.isAddr && c.isAddr && o.prefix.Bits() <= c.prefix.Bits() && o.prefix.Contains(c.prefix.Addr())
	case o.wild:
		return c.name == o.name && c.wild || strings.HasSuffix(c.name, "."+o.name)
	}
	return !c.wild && c.name == o.name
}

func compile(r Rule) (*compiled, error) {
	h := strings.TrimSpace(r.Host)
	if strings.ContainsAny(h, "@/:") && !isAddrRule(h) {
		return nil, fmt.Errorf("%w: %q: a rule is a host name, *.suffix, IP or CIDR, with no scheme, credentials, path or port", ErrInvalid, r.Host)
	}
	c := &compiled{ports: map[int]bool{}}
	ports := r.Ports
	if len(ports) == 0 {
		ports = DefaultPorts
	}
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("%w: port %d of %q is not in 1-65535", ErrInvalid, p, r.Host)
		}
		c.ports[p] = true
	}
	sorted := append([]int(nil), ports...)
	sort.Ints(sorted)
	switch {
	case isAddrRule(h):
		p, err := parsePrefix(h)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrInvalid, r.Host, err)
		}
		c.prefix, c.isAddr = p, true
		c.rule = Rule{Host: p.String(), Ports: sorted}
		if p.IsSingleIP() {
			c.rule.Host = p.Addr().String()
		}
	case h == "*" || strings.Contains(strings.TrimPrefix(h, "*."), "*"):
		return nil, fmt.Errorf("%w: %q: only a leading *. wildcard is allowed, and never a bare *", ErrInvalid, r.Host)
	case strings.HasPrefix(h, "*."):
		n, err := NormalizeHost(h[2:])
		if err != nil {
			return nil, err
		}
		if !strings.Contains(n, ".") {
			return nil, fmt.Errorf("%w: %q: a wildcard needs a suffix of two labels or more", ErrInvalid, r.Host)
		}
		c.name, c.wild = n, true
		c.rule = Rule{Host: "*." + n, Ports: sorted}
	default:
		n, err := NormalizeHost(h)
		if err != nil {
			return nil, err
		}
		if _, ok := parseInetAton(n); ok {
			return nil, fmt.Errorf("%w: %q spells an IP address; write it in dotted decimal", ErrInvalid, r.Host)
		}
		c.name = n
		c.rule = Rule{Host: n, Ports: sorted}
	}
	return c, nil
}

func isAddrRule(h string) bool {
	if _, err := netip.ParsePrefix(h); err == nil {
		return true
	}
	_, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil
}

func parsePrefix(h string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(h); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(strings.Trim(h, "[]"))
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Validate checks a profile, as any tier requires before accepting it.
func (p Profile) Validate() error {
	if strings.TrimSpace(p.Name) == "" {
		return fmt.Errorf("%w: profile has no name", ErrInvalid)
	}
	_, err := compileAll(p.Hosts)
	return err
}

// StaticPolicy is the policy a profile describes.
func (p Profile) StaticPolicy() Policy { return Policy{Mode: Static, Rules: p.Hosts} }

func compileAll(rules []Rule) ([]*compiled, error) {
	out := make([]*compiled, 0, len(rules))
	for _, r := range rules {
		c, err := compile(r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// ParseRule reads HOST or HOST:PORT[,PORT...] (IPv6 in brackets).
func ParseRule(s string) (Rule, error) {
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		host, _, _ := strings.Cut(rest, "/")
		port := map[string]string{"http": ":80", "https": ":443"}[strings.ToLower(scheme)]
		return Rule{}, fmt.Errorf("%w: %q is a URL; a rule is HOST[:PORT,...], here %s%s", ErrInvalid, s, host, port)
	}
	host, ports := s, ""
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "]"); i > 0 {
			host, ports = s[1:i], strings.TrimPrefix(s[i+1:], ":")
		}
	} else if i := strings.LastIndex(s, ":"); i >= 0 && !strings.Contains(s[:i], ":") {
		host, ports = s[:i], s[i+1:]
	}
	r := Rule{Host: host}
	if ports != "" {
		for _, p := range strings.Split(ports, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil {
				return Rule{}, fmt.Errorf("%w: port %q in %q", ErrInvalid, p, s)
			}
			r.Ports = append(r.Ports, n)
		}
	}
	if _, err := compile(r); err != nil {
		return Rule{}, err
	}
	return r, nil
}
