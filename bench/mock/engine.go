// Package mock provides SGLang-shaped prefill and decode engines for pdlb's
// end-to-end tests, its demo, its load benchmarks and its cluster simulator
// (bench/sim): the native /generate API (plain and SSE), the OpenAI routes,
// the info, health and load routes, a latency model (prefill slots, a KV
// prefix cache reported as cached_tokens, a bounded batch whose decode slows
// as it grows, a time scale), and seeded fault injection.
package mock

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
)

// Engine roles, as SGLang's --disaggregation-mode names them.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Options configures an Engine. The zero value of every field means its
// default; defaults are applied in one place, New.
type Options struct {
	// Role is RolePrefill or RoleDecode (default decode). A prefill engine
	// generates one token and streams a single event.
	Role string
	// Model is the served model name (default "mock-model").
	Model string
	// OutputLen is the number of tokens generated per item (default 16);
	// a request's sampling_params.max_new_tokens (OpenAI: max_tokens,
	// max_completion_tokens) overrides it.
	OutputLen int
	// TokenDelay is the pause between stream events when DecodePerToken is
	// unset (default 5ms; negative: none).
	TokenDelay time.Duration
	// KeepOpenAfterDone keeps a stream's body open after `data: [DONE]` until
	// the client closes the connection or a minute passes, as real engines
	// sometimes do (default false).
	KeepOpenAfterDone bool

	// Latency model (issue 4; extended for the cluster simulator, issue 10:
	// see latency.go and bench/sim).

	// PrefillPerToken is a prefill engine's compute time per prompt token
	// its KV cache does not hold; a decode without KVTransfers waits that
	// long per prompt token for the KV (default 0).
	PrefillPerToken time.Duration
	// PrefillOverhead is a fixed time added to every prefill computation
	// (default 0).
	PrefillOverhead time.Duration
	// PrefillSlots is how many prefills a prefill engine computes at once;
	// the others wait in a FIFO queue. Only a prefill that takes time takes
	// a slot (default 1: a GPU runs about one prefill at a time).
	PrefillSlots int
	// KVCacheTokens is the capacity of a prefill engine's KV prefix cache in
	// tokens: prompts are cached by whole blocks of BlockSize tokens, least
	// recently used blocks evicted first, and each answer reports the
	// prompt tokens found cached as meta_info.cached_tokens (default 0: no
	// cache).
	KVCacheTokens int
	// BlockSize is the KV cache's block in tokens (default 16).
	BlockSize int
	// DecodePerToken is the time per output token, for plain answers and
	// between stream events (default 0: streams use TokenDelay).
	DecodePerToken time.Duration
	// DecodePerTokenPerBatch adds to DecodePerToken, for each output token,
	// this much per request decoding on the engine at the time (default 0).
	DecodePerTokenPerBatch time.Duration
	// MaxBatch is the number of requests served at once; more wait in a FIFO
	// queue (default 0: unlimited).
	MaxBatch int
	// TimeScale multiplies every modelled delay (PrefillPerToken,
	// PrefillOverhead, DecodePerToken, DecodePerTokenPerBatch, TokenDelay,
	// KVWaitTimeout), so that minutes of simulated traffic run in less
	// (default 1; 0.2 runs five times faster).
	TimeScale float64
	// KVTransfers, when set, hands rooms from the prefill engines to the
	// decode engines of one process: a decode waits for its room's prefill
	// before its first token, and reports that prefill's cached tokens
	// (default nil; see bench/sim).
	KVTransfers *KVTransfers
	// KVWaitTimeout bounds a decode's wait in KVTransfers (default 300s,
	// SGLang's SGLANG_DISAGGREGATION_WAITING_TIMEOUT).
	KVWaitTimeout time.Duration
	// Seen, when set on the prefill engines of a cluster, records every
	// prompt they receive, so each can count the prefix that any earlier
	// request had (Stats.BestCachedTokens): the hit rate of an ideal router
	// with unbounded caches (default nil).
	Seen *PrefixSet

	// Fault injection. Draws come from one generator seeded with Seed, made
	// in a fixed order per request (error, stall, die), only for
	// probabilities strictly between 0 and 1.

	// ErrorRate is the share of generation requests answered with
	// ErrorStatus before any work (default 0).
	ErrorRate float64
	// ErrorStatus is the status of injected errors (default 500).
	ErrorStatus int
	// StallProb is the share of generation requests accepted and never
	// answered, until the client leaves, the request is aborted or the
	// engine shuts down (default 0).
	StallProb float64
	// DieMidStreamProb is the share of generation requests whose connection
	// is closed abruptly: streams after half their events, plain requests
	// before any answer (default 0).
	DieMidStreamProb float64
	// DieAfterEvents, when positive, closes a stream's connection abruptly
	// right after its first DieAfterEvents events (before [DONE] when the
	// stream has no more), deterministically (default 0: never).
	DieAfterEvents int
	// StallAfterEvents, when positive, stops a stream after its first
	// StallAfterEvents events, its connection open, until the client leaves,
	// the request is aborted or the engine shuts down (default 0: never).
	StallAfterEvents int
	// DieStreams bounds DieAfterEvents and StallAfterEvents to the engine's
	// first DieStreams streams; 0 applies them to every stream (default 0).
	DieStreams int
	// ChainedOutput makes /generate's output token k a function of the whole
	// sequence before it (the prompt's ids and the k tokens generated
	// before), and each token's text a function of its id, so that a
	// request re-issued with prompt+generated (ids, or text) continues with
	// exactly the tokens the first would have produced (default false: token
	// k is FirstOutputID+k whatever the prompt).
	ChainedOutput bool
	// NoAbortRoute answers 404 to POST /abort_request, as an engine from
	// before the route (or a server that is not SGLang) does (default false).
	NoAbortRoute bool
	// SlowStart answers 503 on /health, /health_generate and generation
	// routes until that long after New (default 0).
	SlowStart time.Duration
	// Seed seeds fault injection (default 0, which is a seed like any other).
	Seed int64

	// APIKey and AdminAPIKey are SGLang's --api-key and --admin-api-key:
	// set, requests without the right "Authorization: Bearer <key>" get
	// SGLang's 401 (auth.go; default "": open).
	APIKey, AdminAPIKey string

	// Fast removes every delay and serves plain /generate from precomputed
	// bytes without parsing (when no hook or fault is configured), for
	// measuring the balancer rather than the mock.
	Fast bool

	// BeforeAnswer, when set, runs for every generation request after its
	// bootstrap fields are validated and before the latency model. A non-nil
	// error answers with its HTTP status (see StatusError; default 500).
	// It is where bootstrap behaviour plugs in: see bootstrap.go.
	BeforeAnswer func(ctx context.Context, req *Request) error

	// Clock tells the time (default time.Now); tests inject one for
	// SlowStart and the occupancy figures of Stats.
	Clock func() time.Time

	// KV bootstrap (sglang-wire-protocol.md §3–§5; see bootstrap.go).

	// DP and TP are the engine's attention DP and TP sizes (default 1 each).
	// A prefill registers DP×TP ranks and dispatches each request to DP rank
	// routed_dp_rank, else bootstrap_room % DP.
	DP, TP int
	// Bootstrap is the registry a prefill registers its ranks with, e.g.
	// "http://127.0.0.1:8998" (default "": no registration). Registration
	// starts when the engine first serves, since prefill_http_port is the
	// engine's own port.
	Bootstrap string
	// BootstrapToken is sent as "Authorization: Bearer <token>" on
	// registration (default "": none).
	BootstrapToken string
	// RegisterDelay postpones registration, to reproduce the seed race
	// (default 0).
	RegisterDelay time.Duration
	// RegisterAttempts and RegisterBackoff shape each rank's registration
	// retries: that many attempts with min(RegisterBackoff·2^k, 30s)×[0.75,1)
	// between them (defaults 5 and 1s, SGLang's).
	RegisterAttempts int
	RegisterBackoff  time.Duration
	// FailFast delivers the final registration failure on Engine.Fatal, so
	// `pdlb mock` exits non-zero; without it the engine logs the failure and
	// keeps running unregistered, as SGLang does (default false).
	FailFast bool
	// Lookup makes a decode resolve every request's prefill through the
	// registry at the request's bootstrap_host:bootstrap_port, as SGLang's
	// decode does, and fail the request when it cannot (default false:
	// no registry needed; `pdlb mock --role decode` turns it on).
	Lookup bool
	// LookupAttempts and LookupInterval bound a decode's patience with a
	// registry that answers 503 "not ready" (defaults 20 and 1s).
	LookupAttempts int
	LookupInterval time.Duration
	// Sleep waits between registration and lookup attempts (default: a
	// context-aware time.Sleep); tests inject one to count or shorten waits.
	Sleep func(ctx context.Context, d time.Duration) error
}

// defaultKVWaitTimeout is Options.KVWaitTimeout's default.
const defaultKVWaitTimeout = 300 * time.Second

// StatusError is an error with the HTTP status a hook wants answered.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return e.Message }

// Engine is one mock SGLang engine. Build it with New; serve it with Serve
// or mount Handler on a fasthttp server of your own.
type Engine struct {
	opts    Options
	log     zerolog.Logger
	started time.Time
	// unauthorized counts requests refused for their credentials (auth.go).
	unauthorized atomic.Int64

	srv    *fasthttp.Server
	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc
	// lnMu guards listeners, what Serve was given: Shutdown closes them
	// itself, since fasthttp's closes only those its Serve has taken (a
	// Serve goroutine that had not run yet would serve for ever).
	lnMu      sync.Mutex
	listeners []net.Listener

	rngMu sync.Mutex
	rng   *rand.Rand

	sched          scheduler    // the batch
	prefillSlots   scheduler    // a prefill engine's prefill slots
	cache          *kvCache     // a prefill engine's KV prefix cache; nil: none
	awaiting       atomic.Int64 // decode requests waiting for their KV
	dyingStreams   atomic.Int64 // streams DieAfterEvents has looked at
	awaitingTokens atomic.Int64 // and their tokens (prompt + output)
	stats          stats
	fast           fastAnswers
	ids            atomic.Uint64

	abortMu sync.Mutex
	aborts  map[string]chan struct{} // in-flight requests by client rid

	kv kvState
}

// New builds an Engine with opts' defaults applied.
func New(opts Options, log zerolog.Logger) *Engine {
	if opts.Role != RolePrefill {
		opts.Role = RoleDecode
	}
	if opts.Model == "" {
		opts.Model = "mock-model"
	}
	if opts.OutputLen == 0 {
		opts.OutputLen = 16
	}
	opts.OutputLen = min(max(opts.OutputLen, 0), maxOutputTokens)
	switch {
	case opts.TokenDelay == 0:
		opts.TokenDelay = 5 * time.Millisecond
	case opts.TokenDelay < 0:
		opts.TokenDelay = 0
	}
	if opts.ErrorStatus == 0 {
		opts.ErrorStatus = fasthttp.StatusInternalServerError
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	opts.DP, opts.TP = min(max(opts.DP, 1), maxParallel), min(max(opts.TP, 1), maxParallel)
	if opts.Sleep == nil {
		opts.Sleep = pdlb.SleepContext
	}
	if opts.PrefillSlots <= 0 {
		opts.PrefillSlots = 1
	}
	if opts.BlockSize <= 0 {
		opts.BlockSize = defaultBlockSize
	}
	if opts.TimeScale <= 0 {
		opts.TimeScale = 1
	}
	if opts.KVWaitTimeout <= 0 {
		opts.KVWaitTimeout = defaultKVWaitTimeout
	}
	if opts.Fast {
		opts.TokenDelay, opts.PrefillPerToken, opts.DecodePerToken, opts.MaxBatch = 0, 0, 0, 0
		opts.PrefillOverhead, opts.DecodePerTokenPerBatch = 0, 0
	}
	e := &Engine{
		opts:    opts,
		log:     log.With().Str("mock", opts.Role).Logger(),
		started: opts.Clock(),
		rng:     rand.New(rand.NewPCG(uint64(opts.Seed), 0x9e3779b97f4a7c15)),
		aborts:  make(map[string]chan struct{}),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.kv.init()
	e.sched.init(opts.MaxBatch, opts.Clock)
	e.prefillSlots.init(opts.PrefillSlots, opts.Clock)
	if opts.Role == RolePrefill {
		e.cache = newKVCache(opts.KVCacheTokens, opts.BlockSize)
	}
	e.fast = buildFastAnswers(opts)
	e.srv = &fasthttp.Server{
		Handler:               e.Handler,
		Name:                  "pdlb-mock",
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		IdleTimeout:           time.Minute,
		MaxRequestBodySize:    64 << 20,
		Concurrency:           1 << 20,
		Logger:                fasthttpLogger{e.log},
	}
	return e
}

// Serve answers on ln until Shutdown; it may be called for several listeners.
func (e *Engine) Serve(ln net.Listener) error {
	e.lnMu.Lock()
	if e.ctx.Err() != nil { // shut down already
		e.lnMu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	e.listeners = append(e.listeners, ln)
	e.lnMu.Unlock()
	e.startRegistration(ln.Addr())
	return e.srv.Serve(ln)
}

// Shutdown ends stalls, queues, streams (kept-open ones included) and
// registration, stops the listeners and waits up to 5s for connections to
// finish.
func (e *Engine) Shutdown() error {
	e.lnMu.Lock()
	e.cancel() // a Serve from now on closes its listener at once
	lns := e.listeners
	e.lnMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.srv.ShutdownWithContext(ctx)
	for _, ln := range lns {
		ln.Close() // closed already unless its Serve had not begun
	}
	e.kv.wg.Wait() // registration ends with e.ctx
	return err
}

// Options returns the options in effect (defaults applied).
func (e *Engine) Options() Options { return e.opts }

// stopping is closed when the engine shuts down.
func (e *Engine) stopping() <-chan struct{} { return e.ctx.Done() }

// starting reports whether SlowStart still holds the engine back.
func (e *Engine) starting() bool {
	return e.opts.SlowStart > 0 && e.opts.Clock().Sub(e.started) < e.opts.SlowStart
}

// newID makes a request id: 32 hex digits like SGLang's uuid4().hex,
// deterministic per engine and seed.
func (e *Engine) newID() string {
	n := e.ids.Add(1)
	var b [32]byte
	x := uint64(e.opts.Seed)*0x9e3779b97f4a7c15 + uint64(len(e.opts.Role))
	for i := 0; i < 16; i++ {
		b[i] = hexDigits[(x>>(60-4*uint(i)))&0xf]
	}
	for i := 0; i < 16; i++ {
		b[16+i] = hexDigits[(n>>(60-4*uint(i)))&0xf]
	}
	return string(b[:])
}

// statusOf is the HTTP status a hook error asks for.
func statusOf(err error) (int, string) {
	var se *StatusError
	if errors.As(err, &se) && se.Code != 0 {
		return se.Code, se.Message
	}
	return fasthttp.StatusInternalServerError, err.Error()
}

type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug().Msgf(format, args...)
}
