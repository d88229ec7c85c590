package load

import "time"

// stats are one worker's raw samples for one round; workers merge them when it ends.
type stats struct {
	completed int64
	tokens    int64
	events    int64
	prompt    int64 // prompt tokens of the answered requests
	cached    int64 // of which the engines served from their cache
	cachedN   int64 // answers that reported a cached-token count
	latency   []time.Duration
	ttft      []time.Duration
	itl       histogram
	errors    map[string]int64
}

func (s *stats) ok(latency time.Duration, u usage) {
	s.completed++
	s.tokens += u.completion
	s.prompt += u.prompt
	s.cached += u.cached
	if u.hasCached {
		s.cachedN++
	}
	s.latency = append(s.latency, latency)
}

func (s *stats) fail(class string) {
	if s.errors == nil {
		s.errors = make(map[string]int64)
	}
	s.errors[class]++
}

func (s *stats) merge(o *stats) {
	s.completed += o.completed
	s.tokens += o.tokens
	s.events += o.events
	s.prompt += o.prompt
	s.cached += o.cached
	s.cachedN += o.cachedN
	s.latency = append(s.latency, o.latency...)
	s.ttft = append(s.ttft, o.ttft...)
	s.itl.merge(&o.itl)
	if s.errors == nil && len(o.errors) > 0 {
		s.errors = make(map[string]int64, len(o.errors))
	}
	for k, v := range o.errors {
		s.errors[k] += v
	}
}
