// Package bootstrap is pdlb's embedded SGLang KV bootstrap registry and
// everything that talks the same protocol from the other side: the
// registration client used by prefill ranks (with backoff), the patient
// lookup client used by decodes, the poller that watches external
// registries, and the Directory the request path consults to know whether a
// prefill instance has fully registered.
//
// Wire format: ../shared/docs/sglang-wire-protocol.md §3–§8. Where pdlb
// deliberately differs from SGLang (503 + Retry-After instead of a bare
// 503, 400 instead of 500 for bad input, distinct-rank readiness, write
// auth and source lists, no rank moves without them, DELETE /route) the
// handler's doc comment says so.
//
// The package must not import router or proxy: they depend on it.
package bootstrap
