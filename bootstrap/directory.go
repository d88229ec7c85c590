package bootstrap

import (
	"context"
	"strings"
)

// PrefillInfo is a prefill instance's parallel layout as its bootstrap
// registry reports it (SGLang's PrefillServerInfo, §3.3).
type PrefillInfo struct {
	AttnTPSize, AttnCPSize, DPSize, PPSize int
	// PageSize is nil when the ranks registered without one (older engines).
	PageSize *int
	// KVCacheDtype is nil when the ranks registered without one.
	KVCacheDtype        *string
	FollowBootstrapRoom bool
	// EnableDSACacheLayerSplit and PrefillHTTPPort exist from 2026-07-09.
	EnableDSACacheLayerSplit bool
	PrefillHTTPPort          *int
}

// Ranks is the number of ranks that must register: dp×cp×tp×pp.
func (p PrefillInfo) Ranks() int { return p.DPSize * p.AttnCPSize * p.AttnTPSize * p.PPSize }

// Directory is what the request path knows about prefill registries. addr is
// the bootstrap address "host:port" exactly as engines see it (IPv6
// bracketed). Implemented by *Registry (embedded mode) and *Poller
// (external mode).
type Directory interface {
	// Ready reports whether every rank has registered. Hot path: atomic
	// loads only, no allocation.
	Ready(addr string) bool
	// Info returns the cached info; false while not ready. No I/O.
	Info(addr string) (PrefillInfo, bool)
	// WaitInfo waits (and, for a Poller, fetches now) until the instance is
	// ready or ctx is done; the error then wraps ErrNotReady and ctx.Err(),
	// or ErrUnknownPrefill for an address nobody watches.
	WaitInfo(ctx context.Context, addr string) (PrefillInfo, error)
	// Status reports registered and expected ranks (expected 0 = unknown).
	Status(addr string) (registered, expected int)
}

var (
	_ Directory = (*Registry)(nil)
	_ Directory = (*Poller)(nil)
)

// addrPort extracts the port of "host:port" or "[v6]:port" without
// allocating (Ready is on the request path).
func addrPort(addr string) (int, bool) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 || i == len(addr)-1 || len(addr)-i > 6 {
		return 0, false
	}
	n := 0
	for j := i + 1; j < len(addr); j++ {
		c := addr[j]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return 0, false
	}
	return n, true
}
