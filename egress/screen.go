package egress

import (
	"net/netip"
	"strconv"
	"strings"
)

// special lists the ranges a name rule never reaches: an address rule must
// name them.
var special = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("64:ff9b::/96"), "IPv4-embedded (NAT64)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "IPv4-embedded (NAT64)"},
	{netip.MustParsePrefix("2002::/16"), "IPv4-embedded (6to4)"},
	{netip.MustParsePrefix("2001::/32"), "IPv4-embedded (Teredo)"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
}

// Screen returns why ip may not be reached without an address rule, or ""
// when it is an ordinary public address. An IPv4-mapped address is screened
// as itself and refused as mapped.
func Screen(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid address"
	}
	if ip.Is4In6() {
		if why := Screen(ip.Unmap()); why != "" {
			return why + " (IPv4-mapped)"
		}
		return "IPv4-mapped"
	}
	for _, s := range special {
		if s.prefix.Contains(ip) {
			return s.why + " address " + ip.String()
		}
	}
	return ""
}

// screenedBy is the special range that refuses ip (an unmapped address),
// the narrowest listed: cloud metadata before link-local.
func screenedBy(ip netip.Addr) (netip.Prefix, bool) {
	for _, s := range special {
		if s.prefix.Contains(ip) {
			return s.prefix, true
		}
	}
	return netip.Prefix{}, false
}

// reaches reports whether an address rule of prefix r may admit ip: any
// ordinary address it covers, and a special one only where r names that
// address's special range or a part of it. So 0.0.0.0/0 means the
// Internet, not the host's loopback or its cloud's metadata service,
// and 169.254.0.0/16 does not reach 169.254.169.254.
func reaches(r netip.Prefix, ip netip.Addr) bool {
	if !r.Contains(ip) {
		return false
	}
	s, ok := screenedBy(ip)
	return !ok || s.Bits() <= r.Bits() && s.Contains(r.Addr())
}

// NamesSpecial returns what special range an address rule names (its
// whole range lies within one: private, loopback, link-local, cloud
// metadata...), or "" for a name rule or one of ordinary addresses.
func NamesSpecial(r Rule) string {
	c, err := compile(r)
	if err != nil || !c.isAddr {
		return ""
	}
	for _, s := range special {
		if s.prefix.Bits() <= c.prefix.Bits() && s.prefix.Contains(c.prefix.Addr()) {
			return s.why
		}
	}
	return ""
}

// literalIP reads host as an IP address in any spelling the kernel's
// resolver would accept: IPv6 (bracketed or not), dotted decimal, and the
// inet_aton forms (one to four parts, each decimal, octal with a leading 0,
// or hex with 0x).
func literalIP(host string) (netip.Addr, bool) {
	h := strings.Trim(host, "[]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true
	}
	return parseInetAton(h)
}

func parseInetAton(s string) (netip.Addr, bool) {
	if s == "" || strings.HasSuffix(s, ".") && strings.Count(s, ".") > 3 {
		return netip.Addr{}, false
	}
	s = strings.TrimSuffix(s, ".")
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base, digits := 10, p
		switch {
		case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
			base, digits = 16, p[2:]
			if digits == "" {
				digits = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil || digits == "" {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	last := len(vals) - 1
	for i, v := range vals[:last] {
		if v > 255 {
			return netip.Addr{}, false
		}
		n |= v << (24 - 8*uint(i))
	}
	if vals[last] >= 1<<(32-8*uint(last)) {
		return netip.Addr{}, false
	}
	n |= vals[last]
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}
