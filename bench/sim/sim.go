package sim

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/bench/mock"
)

// Options configures a simulated cluster. Zero values take the defaults
// (Defaults), which the package doc explains.
type Options struct {
	// Prefills and Decodes are the numbers of engines (defaults 4 and 4).
	Prefills, Decodes int
	// Host is the address every listener binds (default "127.0.0.1").
	Host string
	// BasePort is the prefills' first port; the prefills take BasePort,
	// BasePort+1, …, the decodes the ports after them (default 0: any free
	// port for each).
	BasePort int
	// StatsPort is the stats listener's port (default BasePort+100, or any
	// free port when BasePort is 0; -1: no stats listener).
	StatsPort int

	// The engines' model (bench/mock Options of the same names).

	// PrefillPerToken is the prefill time per uncached prompt token (default 100µs).
	PrefillPerToken time.Duration
	// PrefillOverhead is the fixed time of each prefill (default 5ms).
	PrefillOverhead time.Duration
	// PrefillSlots is the prefills one engine computes at once (default 1).
	PrefillSlots int
	// KVCacheTokens is each prefill's KV cache capacity in tokens (default
	// 65536; -1: no cache).
	KVCacheTokens int
	// BlockSize is the KV cache's block in tokens (default 16).
	BlockSize int
	// DecodePerToken is the decode time per output token (default 20ms).
	DecodePerToken time.Duration
	// DecodePerTokenPerBatch adds, per output token, this much per request
	// decoding on the engine (default 500µs).
	DecodePerTokenPerBatch time.Duration
	// MaxBatch is the requests one decode serves at once (default 64).
	MaxBatch int
	// OutputLen is the output length of requests that do not set one
	// (default 64).
	OutputLen int
	// TimeScale multiplies every modelled delay (default 0.2).
	TimeScale float64
	// Model is the served model name (default "mock-model").
	Model string
}

// Defaults returns the options with every default filled in.
func Defaults() Options { return Options{}.withDefaults() }

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Prefills, 4)
	def(&o.Decodes, 4)
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.StatsPort == 0 && o.BasePort > 0 {
		o.StatsPort = o.BasePort + 100
	}
	defDur(&o.PrefillPerToken, 100*time.Microsecond)
	defDur(&o.PrefillOverhead, 5*time.Millisecond)
	def(&o.PrefillSlots, 1)
	def(&o.KVCacheTokens, 65536)
	def(&o.BlockSize, 16)
	defDur(&o.DecodePerToken, 20*time.Millisecond)
	defDur(&o.DecodePerTokenPerBatch, 500*time.Microsecond)
	def(&o.MaxBatch, 64)
	def(&o.OutputLen, 64)
	if o.TimeScale == 0 {
		o.TimeScale = 0.2
	}
	if o.Model == "" {
		o.Model = "mock-model"
	}
	return o
}

// validate reports options no cluster can run with.
func (o Options) validate() error {
	switch {
	case o.Prefills < 1 || o.Decodes < 1:
		return fmt.Errorf("sim: need at least one prefill and one decode, got %d and %d", o.Prefills, o.Decodes)
	case o.BasePort < 0 || o.BasePort+o.Prefills+o.Decodes-1 > 65535:
		return fmt.Errorf("sim: base port %d leaves no room for %d engines below 65536", o.BasePort, o.Prefills+o.Decodes)
	case o.StatsPort < -1 || o.StatsPort > 65535:
		return fmt.Errorf("sim: stats port %d out of range", o.StatsPort)
	case o.BasePort > 0 && o.StatsPort >= o.BasePort && o.StatsPort < o.BasePort+o.Prefills+o.Decodes:
		return fmt.Errorf("sim: stats port %d is one of the engines' (%d..%d)", o.StatsPort, o.BasePort, o.BasePort+o.Prefills+o.Decodes-1)
	case o.TimeScale < 0:
		return fmt.Errorf("sim: time scale %g must be positive", o.TimeScale)
	case o.PrefillPerToken < 0 || o.PrefillOverhead < 0 || o.DecodePerToken < 0 || o.DecodePerTokenPerBatch < 0:
		return errors.New("sim: model delays must not be negative")
	case o.PrefillSlots < 1 || o.BlockSize < 1 || o.MaxBatch < 1 || o.OutputLen < 1:
		return errors.New("sim: prefill slots, block size, max batch and output length must be at least 1")
	}
	return nil
}

// Cluster is a running simulated cluster. Build it with Start.
type Cluster struct {
	opts      Options
	log       zerolog.Logger
	engines   []engine
	transfers *mock.KVTransfers
	seen      *mock.PrefixSet

	mu     sync.Mutex
	since  time.Time // start of the stats window
	stats  *fasthttp.Server
	statsL net.Listener
	wg     sync.WaitGroup
}

type engine struct {
	role string
	url  string
	e    *mock.Engine
}

// Start listens on every engine's port and serves the cluster in the
// background until Shutdown.
func Start(o Options, log zerolog.Logger) (*Cluster, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &Cluster{
		opts:      o,
		log:       log,
		transfers: mock.NewKVTransfers(),
		seen:      mock.NewPrefixSet(o.BlockSize),
		since:     time.Now(),
	}
	var lns []net.Listener
	fail := func(err error) (*Cluster, error) {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	for i := 0; i < o.Prefills+o.Decodes; i++ {
		port := 0
		if o.BasePort > 0 {
			port = o.BasePort + i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(port)))
		if err != nil {
			return fail(fmt.Errorf("sim: engine %d: %w", i, err))
		}
		lns = append(lns, ln)
	}
	if o.StatsPort >= 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.StatsPort)))
		if err != nil {
			return fail(fmt.Errorf("sim: stats listener: %w", err))
		}
		c.statsL = ln
	}
	for i, ln := range lns {
		role, eo := mock.RoleDecode, c.decodeOptions()
		if i < o.Prefills {
			role, eo = mock.RolePrefill, c.prefillOptions()
		}
		e := mock.New(eo, log)
		c.engines = append(c.engines, engine{role: role, url: "http://" + ln.Addr().String(), e: e})
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			_ = e.Serve(ln)
		}()
	}
	if c.statsL != nil {
		c.stats = &fasthttp.Server{Handler: c.serveStats, Name: "pdlb-sim", NoDefaultServerHeader: true, NoDefaultDate: true}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			_ = c.stats.Serve(c.statsL)
		}()
	}
	return c, nil
}

func (c *Cluster) prefillOptions() mock.Options {
	o := c.opts
	kv := o.KVCacheTokens
	if kv < 0 {
		kv = 0
	}
	return mock.Options{
		Role: mock.RolePrefill, Model: o.Model, OutputLen: o.OutputLen, TokenDelay: -1,
		PrefillPerToken: o.PrefillPerToken, PrefillOverhead: o.PrefillOverhead, PrefillSlots: o.PrefillSlots,
		KVCacheTokens: kv, BlockSize: o.BlockSize, TimeScale: o.TimeScale,
		KVTransfers: c.transfers, Seen: c.seen,
	}
}

func (c *Cluster) decodeOptions() mock.Options {
	o := c.opts
	return mock.Options{
		Role: mock.RoleDecode, Model: o.Model, OutputLen: o.OutputLen, TokenDelay: -1,
		DecodePerToken: o.DecodePerToken, DecodePerTokenPerBatch: o.DecodePerTokenPerBatch, MaxBatch: o.MaxBatch,
		BlockSize: o.BlockSize, TimeScale: o.TimeScale, KVTransfers: c.transfers,
	}
}

// Options returns the options in effect (defaults applied).
func (c *Cluster) Options() Options { return c.opts }

// PrefillURLs and DecodeURLs are the engines' base URLs, in port order.
func (c *Cluster) PrefillURLs() []string { return c.urls(mock.RolePrefill) }

// DecodeURLs: see PrefillURLs.
func (c *Cluster) DecodeURLs() []string { return c.urls(mock.RoleDecode) }

func (c *Cluster) urls(role string) []string {
	var out []string
	for _, e := range c.engines {
		if e.role == role {
			out = append(out, e.url)
		}
	}
	return out
}

// StatsURL is the stats listener's base URL ("" without one).
func (c *Cluster) StatsURL() string {
	if c.statsL == nil {
		return ""
	}
	return "http://" + c.statsL.Addr().String()
}

// Reset clears the engines' KV caches and counters, the upper bound's
// record and the unclaimed KV hand-overs, and starts a new stats window.
func (c *Cluster) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.engines {
		e.e.FlushCache()
		e.e.ResetStats()
	}
	c.seen.Reset()
	c.transfers.Reset()
	c.since = time.Now()
}

// Shutdown stops the engines (ending what they serve) and the stats
// listener, and waits for them.
func (c *Cluster) Shutdown() error {
	var errs []error
	for _, e := range c.engines {
		if err := e.e.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("sim: %s %s: %w", e.role, e.url, err))
		}
	}
	if c.stats != nil {
		if err := c.stats.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("sim: stats listener: %w", err))
		}
		c.statsL.Close() // fasthttp closes it only if its Serve had begun
	}
	c.wg.Wait()
	return errors.Join(errs...)
}
