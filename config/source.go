package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParseSource reads one bootstrap.allowed_sources entry: a CIDR
// ("10.0.0.0/16"), or a bare IP meaning that host alone (/32 or /128).
// Validate refuses entries it cannot read; the registry reads them with it
// again, so the two can never disagree on what an entry means.
//
// Host bits are dropped ("10.1.2.3/8" is 10.0.0.0/8: the prefix length is
// what the operator wrote). An IPv4-mapped IPv6 entry ("::ffff:10.0.0.0/104")
// becomes its IPv4 form, because peers are compared in theirs: a dual-stack
// listener reports an IPv4 client as ::ffff:a.b.c.d. A zone ("fe80::1%eth0")
// is refused: a peer address carries none to compare with.
func ParseSource(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (want e.g. \"10.0.0.0/16\" or a bare IP)", s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or a CIDR (want e.g. \"10.0.0.5\" or \"10.0.0.0/16\")", s)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q has an IPv6 zone, which a peer address never carries; drop it", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
