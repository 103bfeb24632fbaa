package runs

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
)

// dnsTimeout bounds the whole screening of a run's hosts.
const dnsTimeout = 3 * time.Second

// EgressRefused is a net or import host refused before the run started.
type EgressRefused struct {
	Host   string
	Reason string
}

func (e *EgressRefused) Error() string { return fmt.Sprintf("host %q: %s", e.Host, e.Reason) }

// screen refuses a host that is, or resolves to, an address outside the
// public internet (private, loopback, link-local, metadata, …; the egress
// proxy's own list), with the reason. A name that does not resolve is
// refused too: nothing is admitted unchecked. The proxy checks again at
// every connect, so a name that changes its answer later gains nothing.
func screen(ctx context.Context, r egress.LookupNetIP, hosts []string) ([]egress.Rule, error) {
	if len(hosts) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	defer cancel()
	rules := make([]egress.Rule, 0, len(hosts))
	for _, h := range hosts {
		rule, err := egress.ParseRule(h)
		if err != nil {
			return nil, &EgressRefused{h, "not a host or host:port: " + err.Error()}
		}
		name := strings.ToLower(strings.TrimSuffix(rule.Host, "."))
		if name == "localhost" || strings.HasSuffix(name, ".localhost") || strings.HasSuffix(name, ".local") {
			return nil, &EgressRefused{h, "a loopback or mDNS name"}
		}
		var addrs []netip.Addr
		if ip, err := netip.ParseAddr(strings.Trim(rule.Host, "[]")); err == nil {
			addrs = []netip.Addr{ip}
		} else {
			got, err := r.LookupNetIP(ctx, "ip", rule.Host)
			if err != nil || len(got) == 0 {
				if ctx.Err() != nil {
					return nil, &EgressRefused{h, "resolving it took too long"}
				}
				return nil, &EgressRefused{h, "the name does not resolve"}
			}
			addrs = got
		}
		for _, ip := range addrs {
			if why := egress.Screen(ip.Unmap()); why != "" {
				return nil, &EgressRefused{h, "resolves to a " + why}
			}
		}
		rules = append(rules, rule)
	}
	return rules, nil
}
