package egress

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// matcher is a compiled policy.
type matcher struct {
	mode  Mode
	rules []*compiled
}

// compilePolicy validates p (asking its resolver, if it has one).
func compilePolicy(ctx context.Context, p Policy) (*matcher, error) {
	switch p.Mode {
	case "", DenyAll:
		return &matcher{mode: DenyAll}, nil
	case AllowAll:
		return &matcher{mode: AllowAll}, nil
	case Static:
		rules, err := compileAll(p.Rules)
		if err != nil {
			return nil, err
		}
		return &matcher{mode: Static, rules: rules}, nil
	case Dynamic:
		if p.Resolver == nil {
			return nil, fmt.Errorf("%w: a resolver policy needs a resolver", ErrInvalid)
		}
		got, err := p.Resolver(ctx)
		if err != nil {
			return nil, fmt.Errorf("egress resolver: %w", err)
		}
		rules, err := compileAll(got)
		if err != nil {
			return nil, err
		}
		return &matcher{mode: Static, rules: rules}, nil
	}
	return nil, fmt.Errorf("%w: unknown mode %q", ErrInvalid, p.Mode)
}

// matchName finds the rule admitting a host name on port; "" means none.
func (m *matcher) matchName(name string, port int) (string, bool) {
	if m.mode == AllowAll {
		return "allow-all", true
	}
	for _, r := range m.rules {
		if r.isAddr || !r.ports[port] {
			continue
		}
		if (!r.wild && name == r.name) || (r.wild && strings.HasSuffix(name, "."+r.name)) {
			return r.rule.Host, true
		}
	}
	return "", false
}

// matchAddr finds an address rule admitting ip on port (reaches).
func (m *matcher) matchAddr(ip netip.Addr, port int) (string, bool) {
	ip = ip.Unmap()
	for _, r := range m.rules {
		if r.isAddr && r.ports[port] && reaches(r.prefix, ip) {
			return r.rule.Host, true
		}
	}
	return "", false
}

// hostAllowed reports whether a name (or literal) on port is admitted by
// the rules at all, before any address is known.
func (m *matcher) hostAllowed(host string, port int) (string, bool) {
	if ip, ok := literalIP(host); ok {
		if m.mode == AllowAll {
			return "allow-all", true
		}
		return m.matchAddr(ip, port)
	}
	return m.matchName(host, port)
}

// addrAllowed decides one resolved (or literal) address: the screen
// refuses special ranges unless an address rule names them.
func (m *matcher) addrAllowed(ip netip.Addr, port int) (string, bool) {
	if rule, ok := m.matchAddr(ip, port); ok {
		return rule, true
	}
	if reason := Screen(ip); reason != "" {
		return reason, false
	}
	return "", true
}
