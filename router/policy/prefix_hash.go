package policy

import (
	"fmt"

	"github.com/cespare/xxhash/v2"

	"pdlb/config"
	"pdlb/proxy"
)

// PrefixHash sends requests whose prompts begin alike to the same backend,
// where the prefix is cached: rendezvous hashing of the first prefix_bytes
// of the prompt's raw JSON, with bounded loads (rendezvous.go). It keeps no
// state, so every pdlb replica sends a prefix to the same home.
//
// The key is one hash of the prefix rather than of blocks of it: without a
// record of what each backend holds, a longest-matching-block rule has
// nothing to match against, and blocks would only re-slice the same bytes.
type PrefixHash struct {
	prefixBytes int
	hash        rendezvous
}

var _ Policy = (*PrefixHash)(nil)

func newPrefixHash(role proxy.Role, c config.PrefixHash) (*PrefixHash, error) {
	if c.PrefixBytes < 1 {
		return nil, fmt.Errorf("prefix_hash: prefix_bytes %d must be at least 1", c.PrefixBytes)
	}
	if !validLoadFactor(c.LoadFactor) {
		return nil, fmt.Errorf("prefix_hash: load_factor %v must be at least 1", c.LoadFactor)
	}
	return &PrefixHash{prefixBytes: c.PrefixBytes, hash: newRendezvous(role, c.LoadFactor)}, nil
}

// Pick implements Policy. A request without a prompt has no key and goes
// to the less loaded of two random backends.
func (p *PrefixHash) Pick(req Request, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason) {
	if len(req.Prompt) == 0 {
		return p.hash.pickKeyless(req, cands, ok)
	}
	return p.hash.pick(xxhash.Sum64(req.Prompt[:min(len(req.Prompt), p.prefixBytes)]), cands, ok)
}
