package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"pdlb/bench/mock"
	"pdlb/config"
)

func mockCmd(args []string) error {
	fs := flag.NewFlagSet("pdlb mock", flag.ContinueOnError)
	var o mock.Options
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 0, "port to listen on (required)")
	fs.StringVar(&o.Role, "role", "", "prefill or decode (required)")
	fs.StringVar(&o.Model, "model", "mock-model", "model name reported by the info routes")
	tokenDelay := fs.Duration("token-delay", 5*time.Millisecond, "delay per streamed token (0: none)")
	fs.IntVar(&o.OutputLen, "output-len", 16, "tokens generated when the request does not say")
	fs.DurationVar(&o.PrefillPerToken, "prefill-per-token", 0, "latency model: prefill time per input token")
	fs.DurationVar(&o.DecodePerToken, "decode-per-token", 0, "latency model: decode time per output token")
	fs.IntVar(&o.MaxBatch, "max-batch", 0, "latency model: concurrent requests; more queue (0: unlimited)")
	fs.DurationVar(&o.PrefillOverhead, "prefill-overhead", 0, "latency model: fixed time of each prefill (prefill role)")
	fs.IntVar(&o.PrefillSlots, "prefill-slots", 1, "latency model: prefills computed at once; more queue (prefill role)")
	fs.IntVar(&o.KVCacheTokens, "kv-cache-tokens", 0, "latency model: KV prefix cache capacity in tokens, reported as cached_tokens (prefill role; 0: none)")
	fs.IntVar(&o.BlockSize, "block-size", 16, "latency model: KV cache block in tokens")
	fs.DurationVar(&o.DecodePerTokenPerBatch, "decode-per-token-per-batch", 0, "latency model: added per output token for each request in the batch")
	fs.Float64Var(&o.TimeScale, "time-scale", 1, "latency model: multiplies every modelled delay")
	fs.Float64Var(&o.ErrorRate, "error-rate", 0, "fault: fraction of requests answered with --error-status")
	fs.IntVar(&o.ErrorStatus, "error-status", 500, "fault: status of injected errors")
	fs.Float64Var(&o.StallProb, "stall-prob", 0, "fault: fraction of requests accepted and never answered")
	fs.Float64Var(&o.DieMidStreamProb, "die-mid-stream", 0, "fault: fraction of requests whose connection is cut mid-answer")
	fs.IntVar(&o.DieAfterEvents, "die-after-events", 0, "fault: cut each stream's connection after exactly this many events (0: never)")
	fs.IntVar(&o.StallAfterEvents, "stall-after-events", 0, "fault: stop each stream after exactly this many events, its connection open (0: never)")
	fs.IntVar(&o.DieStreams, "die-streams", 0, "fault: --die-after-events and --stall-after-events apply to the first this many streams only (0: all)")
	fs.BoolVar(&o.ChainedOutput, "chained-output", false, "output token k of /generate is a hash of the sequence before it (prompt+generated continues exactly)")
	fs.DurationVar(&o.SlowStart, "slow-start", 0, "fault: answer 503 until this long after start")
	fs.BoolVar(&o.KeepOpenAfterDone, "keep-open", false, "keep stream bodies open after data: [DONE]")
	fs.BoolVar(&o.Fast, "fast", false, "answer at once with minimal work (for measuring the balancer)")
	fs.Int64Var(&o.Seed, "seed", 0, "seed for fault injection")
	fs.StringVar(&o.APIKey, "api-key", "", "require \"Authorization: Bearer <key>\" as SGLang's --api-key does (all but /health*)")
	fs.StringVar(&o.AdminAPIKey, "admin-api-key", "", "require this key instead on /abort_request and /flush_cache, as SGLang's --admin-api-key does")
	fs.IntVar(&o.DP, "dp", 1, "bootstrap: attention DP size (prefill registers and dispatches dp×tp ranks)")
	fs.IntVar(&o.TP, "tp", 1, "bootstrap: attention TP size")
	fs.StringVar(&o.Bootstrap, "bootstrap", "", "bootstrap: registry URL a prefill registers its ranks with, e.g. http://127.0.0.1:8998")
	fs.DurationVar(&o.RegisterDelay, "register-delay", 0, "bootstrap: wait this long before registering (reproduces the seed race)")
	fs.StringVar(&o.BootstrapToken, "bootstrap-token", "", "bootstrap: bearer token for registration")
	fs.BoolVar(&o.FailFast, "fail-fast", false, "bootstrap: exit non-zero when registration finally fails (default: keep running unregistered, as SGLang)")
	lookup := fs.Bool("lookup", true, "bootstrap: a decode resolves each request's prefill through the registry named in its body, as SGLang's decode does (default off with --fast)")
	fs.IntVar(&o.LookupAttempts, "lookup-attempts", config.Default().Bootstrap.LookupAttempts, "bootstrap: a decode's attempts at a registry answering 503 not ready")
	fs.DurationVar(&o.LookupInterval, "lookup-interval", config.Default().Bootstrap.LookupInterval, "bootstrap: pause between those attempts")
	level := fs.String("log-level", "info", "log level")
	if err := fs.Parse(args); err != nil {
		return &exitError{2, err}
	}
	if o.Role != mock.RolePrefill && o.Role != mock.RoleDecode {
		return &exitError{2, fmt.Errorf("mock: --role must be prefill or decode, got %q", o.Role)}
	}
	if *port <= 0 || *port > 65535 {
		return &exitError{2, fmt.Errorf("mock: --port %d out of range 1..65535", *port)}
	}
	if o.DP < 1 || o.TP < 1 {
		return &exitError{2, fmt.Errorf("mock: --dp and --tp must be at least 1, got %d and %d", o.DP, o.TP)}
	}
	// --fast measures the balancer, not a registry: no lookups unless asked.
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "lookup" })
	o.Lookup = *lookup && o.Role == mock.RoleDecode && (explicit || !o.Fast)
	o.TokenDelay = *tokenDelay
	if o.TokenDelay == 0 {
		o.TokenDelay = -1 // the engine reads 0 as "default"
	}
	base, flushLog := newLogger(config.Log{Level: *level, Format: "console"})
	defer flushLog()
	e, err := startMock(o, net.JoinHostPort(*host, strconv.Itoa(*port)), base)
	if err != nil {
		return err
	}
	if err := waitForMock(e); err != nil {
		e.Shutdown()
		return &exitError{1, err}
	}
	return e.Shutdown()
}

// waitForMock returns nil on a stop signal, or the engine's fatal error
// (a FailFast prefill whose registration finally failed).
func waitForMock(e *mock.Engine) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	select {
	case <-sig:
		return nil
	case err := <-e.Fatal():
		return err
	}
}

// startMock listens on addr and serves a mock engine in the background
// (its log lines name it: mock.New adds "mock": role).
func startMock(o mock.Options, addr string, log zerolog.Logger) (*mock.Engine, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mock %s: listen %s: %w", o.Role, addr, err)
	}
	e := mock.New(o, log)
	go e.Serve(ln)
	log.Info().Str("mock", o.Role).Str("addr", ln.Addr().String()).Msg("mock engine listening")
	return e, nil
}
