package bootstrap

import (
	"net/netip"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
)

// sourceList is bootstrap.allowed_sources, parsed once: the networks whose
// TCP peers may write to the registry.
type sourceList struct {
	// set is true when any entry was configured, even one that did not
	// parse: an entry Validate would have refused matches nothing, so a
	// typo narrows who may write instead of opening the registry to all.
	set      bool
	prefixes []netip.Prefix
}

func newSourceList(entries []string, log zerolog.Logger) sourceList {
	s := sourceList{set: len(entries) > 0}
	for i, e := range entries {
		p, err := config.ParseSource(e)
		if err != nil {
			log.Error().Int("index", i).Err(err).Msg("bootstrap.allowed_sources entry ignored; it admits no peer")
			continue
		}
		s.prefixes = append(s.prefixes, p)
	}
	return s
}

// allows reports whether peer is in one of the networks. Call it only when
// set; an empty list allows nobody.
func (s sourceList) allows(peer netip.Addr) bool {
	for _, p := range s.prefixes {
		if p.Contains(peer) {
			return true
		}
	}
	return false
}

// peerAddr is the request's TCP peer, never a header (X-Forwarded-For is
// whatever the sender wrote). IPv4 peers come back in their IPv4 form, as
// config.ParseSource stores IPv4 entries, even when a dual-stack listener
// reports them as ::ffff:a.b.c.d. It is the zero Addr when the connection
// has no IP address (an in-memory or unix listener), which no list allows
// and which is not loopback.
func peerAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	a, ok := netip.AddrFromSlice(ctx.RemoteIP())
	// fasthttp reports a peer without an IP as ::ffff:0.0.0.0: unmap first.
	if a = a.Unmap(); !ok || a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}
