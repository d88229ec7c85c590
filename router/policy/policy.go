// Package policy holds pdlb's selection policies: one file each, each a
// small type behind Policy with its parameters (config.Policy) and a
// table test. New builds one by its configured name.
//
// A request's pair is decided in one step (router.pickPair): the prefill
// policy picks among the available prefills, then the decode policy picks
// among the available decodes knowing the prefill chosen (Request.Prefill),
// so a decode choice can depend on it.
package policy

import (
	"fmt"

	"pdlb/config"
	"pdlb/proxy"
)

// Policy picks one backend of a role for a request.
type Policy interface {
	// Pick returns the chosen backend among cands that ok accepts, or nil
	// when ok accepts none, and why it was chosen (for the log line).
	Pick(req Request, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason)
}

// Observer is a Policy that learns from where requests went: Chosen is
// called once the request's backend is fixed (its breaker admitted it).
type Observer interface {
	Chosen(req Request, b *proxy.Backend)
}

// Request is what a policy sees of a request. Its byte slices point into
// the request's body and are valid only during the Pick and Chosen calls.
type Request struct {
	// Prompt is the prompt as the body carries it, raw JSON: the text (or
	// text list) of /generate, else its input_ids, the messages of a chat
	// request, the prompt of a completion; nil when there is none.
	Prompt []byte
	// Key is the request's routing key (consistent_hashing), "" if none.
	Key string
	// Prefill is the prefill chosen for the request, set before the decode
	// policy picks.
	Prefill *proxy.Backend
}

// Reason says why a policy picked a backend: a log field and its value
// ("prefill_load", 3). The zero Reason adds nothing to the log line.
type Reason struct {
	Key   string
	Value float64
}

// New builds the policy called name for role, with its parameters from cfg.
// An unknown name is an error (config validation refuses it first).
func New(name string, role proxy.Role, cfg config.Policy) (Policy, error) {
	switch name {
	case "random":
		return Random{}, nil
	case "round_robin":
		return &RoundRobin{}, nil
	case "power_of_two":
		return newPowerOfTwo(role, cfg.PowerOfTwo), nil
	case "prefix_hash":
		return newPrefixHash(role, cfg.PrefixHash)
	case "consistent_hashing":
		return newConsistentHashing(role, cfg.ConsistentHashing)
	case "cache_aware":
		p, err := newCacheAware(role, cfg.CacheAware)
		if err != nil {
			return nil, err // a typed nil would be a non-nil Policy
		}
		return p, nil
	}
	return nil, fmt.Errorf("policy %q: not one of %v", name, config.Policies)
}
