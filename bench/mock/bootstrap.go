package mock

// ---------------------------------------------------------------------------
// TODO(bootstrap): KV bootstrap behaviour (a separate task adds it here).
//
// Real PD engines talk to a bootstrap registry (sglang-wire-protocol.md §3–§5):
//   - a prefill engine PUTs /route once per rank at start-up (with retries,
//     §4) and is unusable to decodes until every rank has registered;
//   - a decode engine, per request, resolves bootstrap_host:bootstrap_port's
//     parallel info (sentinel GET /route, cached), the prefill DP rank
//     (disagg_prefill_dp_rank, room % dp_size or /query_dp_ranks) and the
//     per-rank entries, and fails the request with SGLang's messages
//     ("Decode handshake failed …", HTTP 500) when it cannot.
//
// The seams already in place:
//   - Options.BeforeAnswer runs for every generation request after the
//     bootstrap fields are validated; Request carries them normalised per
//     item (BootstrapHosts, BootstrapPorts, BootstrapRooms). A decode-side
//     lookup is a BeforeAnswer that queries the registry and returns a
//     *StatusError{Code: 500, Message: "Decode handshake failed …"}.
//   - A registering prefill needs its own topology and registry address:
//     add Options fields (DP, TP, PP int; Bootstrap string — the registry
//     URL; RegisterRetries) and start the registration from New or from a
//     Start method, reporting readiness through /health (SlowStart shows
//     how a not-ready engine answers).
// ---------------------------------------------------------------------------
