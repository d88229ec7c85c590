package policy

import (
	"fmt"

	"github.com/cespare/xxhash/v2"

	"pdlb/config"
	"pdlb/proxy"
)

// ConsistentHashing keeps the requests of one routing key (a session, a
// user) on one backend: rendezvous hashing of Request.Key, with bounded
// loads (rendezvous.go). The router fills the key from the header that
// KeyHeader names.
type ConsistentHashing struct {
	header string
	hash   rendezvous
}

var (
	_ Policy = (*ConsistentHashing)(nil)
	_ Keyed  = (*ConsistentHashing)(nil)
)

// Keyed is a Policy that routes by Request.Key: the router reads the key
// from the request header KeyHeader names, and reads no header when no
// policy in force is Keyed.
type Keyed interface {
	KeyHeader() string
}

func newConsistentHashing(role proxy.Role, c config.ConsistentHashing) (*ConsistentHashing, error) {
	if c.Header == "" {
		return nil, fmt.Errorf("consistent_hashing: header is required")
	}
	if !validLoadFactor(c.LoadFactor) {
		return nil, fmt.Errorf("consistent_hashing: load_factor %v must be at least 1", c.LoadFactor)
	}
	return &ConsistentHashing{header: c.Header, hash: newRendezvous(role, c.LoadFactor)}, nil
}

// KeyHeader implements Keyed.
func (p *ConsistentHashing) KeyHeader() string { return p.header }

// Pick implements Policy. A request without a key goes to the less loaded
// of two random backends.
func (p *ConsistentHashing) Pick(req Request, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason) {
	if req.Key == "" {
		return p.hash.pickKeyless(req, cands, ok)
	}
	return p.hash.pick(xxhash.Sum64String(req.Key), cands, ok)
}
