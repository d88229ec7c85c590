// Package sim runs a simulated SGLang prefill/decode cluster in one process,
// for measuring pdlb's routing policies (`pdlb sim`, bench/policies.sh): N
// prefill and M decode mock engines (bench/mock), each on its own loopback
// port, and a stats listener.
//
// # What is modelled
//
// A prefill engine computes one prefill at a time (PrefillSlots), the others
// queue in FIFO order; a prefill takes PrefillOverhead + PrefillPerToken ×
// the prompt tokens its KV prefix cache does not hold. The cache holds
// KVCacheTokens tokens in blocks of BlockSize, each keyed by a hash chained
// over the blocks before it, least recently used blocks evicted first; every
// answer reports what was found cached as SGLang does
// (meta_info.cached_tokens; usage.prompt_tokens_details.cached_tokens on
// the OpenAI routes). Prompts are tokenized one token per ASCII-whitespace
// word, so prompts sharing a word prefix share a token prefix.
//
// A decode engine waits for its request's prefill to finish (the engines
// share a table keyed by bootstrap_room, standing in for the KV transfer),
// then for a place in its batch (MaxBatch, FIFO), then produces each output
// token in DecodePerToken + DecodePerTokenPerBatch × the requests decoding
// on it. It reports its prefill's cached_tokens. No bootstrap registry is
// involved: run pdlb with bootstrap.mode off; bootstrap_room is required.
//
// TimeScale multiplies every modelled delay, so that minutes of simulated
// traffic run in about a minute: at 0.2, one real second is five simulated
// seconds, and a request rate of R real req/s is R × 0.2 simulated req/s.
// Latencies measured in front of the cluster are real; divide by TimeScale
// for simulated ones. Below about 0.1 the real overheads (HTTP, pdlb, the
// load generator: around a millisecond) start to weigh against the
// modelled times.
//
// # Calibration
//
// The defaults are for 4 prefill + 4 decode engines under prompts of 500 to
// 2000 tokens (1250 on average) and 64 output tokens, so that a random
// policy keeps the prefills busy but not saturated at a rate a 2-core
// machine can drive with pdlb in front:
//
//   - Prefill: 100µs per uncached token (10k tokens/s, a mid-size model on
//     one GPU) + 5ms per prefill: 130ms for an average prompt with nothing
//     cached, so one engine serves at most 7.7 req/s and four 31 req/s.
//     Random spreads λ req/s as λ/4 per engine, for a utilisation of
//     λ × 0.13 / 4: 50% at 15 req/s, 80% at 25 req/s. The reference load
//     is 20 simulated req/s: 65% busy, and as an M/G/1 queue each engine
//     makes a request wait about as long again as its own prefill (≈ 0.13s),
//     which is what a better policy can win back. Prefix reuse lowers the
//     utilisation of every policy, more for those that find the cache.
//   - Decode: 20ms per token + 0.5ms per request in the batch. At the
//     reference load each decode receives 5 req/s and, by Little's law,
//     holds about 8 of them: 24ms per token, 1.5s for 64 tokens. MaxBatch
//     64 is never reached unless a policy piles requests on one decode.
//   - KV cache: 64Ki tokens per prefill engine, about 50 average prompts:
//     one engine cannot hold a workload of a few hundred distinct prefixes,
//     the four together hold four times more, so where a prefix is computed
//     matters.
//   - TimeScale 0.2: the reference load is 100 real req/s, and 64-token
//     streams make 6400 relayed events/s. pdlb spends about 43µs of CPU per
//     relayed event (bench/RESULTS.md, "streams"), so relaying takes about a
//     third of a core and the whole run (pdlb, engines, load generator) fits
//     on two. A prefill then lasts 26ms real and a token gap about 5ms, far
//     above timer jitter. One minute of real time is five simulated.
//
// # Stats
//
// The stats listener (default: base port + 100) answers GET /stats with a
// Report in JSON: per engine its role, URL, generation requests, input,
// cached and output tokens, the busy time of its prefill slot (prefill) or
// batch (decode), peak running and queued requests; for the cluster the hit
// rate (cached ÷ input tokens over the prefills) and its upper bound (for
// every prefill request, the longest prefix in full blocks that any earlier
// request had, capacity ignored: every request on the engine holding its
// longest prefix). POST /reset clears the caches, the counters and the
// upper bound's record between runs.
package sim
