// Package proxy owns pdlb's side of the backends: the pool of prefill and
// decode engines, their upstream connections, circuit breakers and health,
// one fan-out attempt of a PD request (both legs concurrently, the sibling
// cancelled on failure), the SSE relay and the logprob merge.
//
// Retries and selection live in the router, which calls Proxy.Do once per
// attempt; everything here is about one pair of backends at a time.
package proxy
