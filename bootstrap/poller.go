package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
)

// PollerOptions configures a Poller. Zero values take the defaults noted.
type PollerOptions struct {
	// Interval between polls while a registry is not ready. Default 1s
	// (config.Bootstrap.PollInterval).
	Interval time.Duration
	// Refresh between polls once ready. Default 5s (the health interval).
	Refresh time.Duration
	// Timeout of one GET. Default 5s.
	Timeout time.Duration
	// Sleep waits between polls. Default pdlb.SleepContext.
	Sleep pdlb.SleepFunc
	// Client sends the GETs. Default a new fasthttp.Client.
	Client *fasthttp.Client
}

// Poller is the Directory of external mode: stock SGLang prefills run their
// own bootstrap servers and pdlb polls each one's sentinel route. One
// goroutine per address; a failed poll (non-200, transport error, bad body)
// marks the address not ready until a poll succeeds again, so a restarted
// prefill is not routed to while it re-registers.
type Poller struct {
	o   PollerOptions
	log zerolog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	targets atomic.Pointer[map[string]*target] // copy-on-write: Ready takes no lock
}

type target struct {
	addr, url string
	cancel    context.CancelFunc

	info       atomic.Pointer[PrefillInfo] // non-nil iff ready
	registered atomic.Int64
	expected   atomic.Int64

	mu      sync.Mutex
	readyCh chan struct{}      // closed while ready
	wake    context.CancelFunc // ends the current sleep early
	kicked  bool               // a wake came while no sleep was running
}

// NewPoller returns a Poller with no addresses; Close stops it.
func NewPoller(o PollerOptions, log zerolog.Logger) *Poller {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = lookupTimeout
	}
	if o.Sleep == nil {
		o.Sleep = pdlb.SleepContext
	}
	if o.Client == nil {
		o.Client = &fasthttp.Client{NoDefaultUserAgentHeader: true}
	}
	p := &Poller{o: o, log: log.With().Str("component", "bootstrap-poller").Logger()}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.targets.Store(&map[string]*target{})
	return p
}

// Add starts polling the registry at addr ("host:port", IPv6 bracketed); a
// no-op if it is polled already or the Poller is closed.
func (p *Poller) Add(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.targets.Load()
	if _, ok := old[addr]; ok || p.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	t := &target{addr: addr, url: "http://" + addr + "/route?" + SentinelQuery, cancel: cancel, readyCh: make(chan struct{})}
	m := make(map[string]*target, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[addr] = t
	p.targets.Store(&m)
	p.wg.Add(1)
	go p.run(ctx, t)
}

// Remove stops polling addr and forgets its info.
func (p *Poller) Remove(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.targets.Load()
	t, ok := old[addr]
	if !ok {
		return
	}
	t.cancel()
	m := make(map[string]*target, len(old))
	for k, v := range old {
		if k != addr {
			m[k] = v
		}
	}
	p.targets.Store(&m)
}

// Close stops every poll and waits for the goroutines to end.
func (p *Poller) Close() {
	p.cancel()
	p.wg.Wait()
}

func (p *Poller) run(ctx context.Context, t *target) {
	defer p.wg.Done()
	for {
		p.poll(t)
		d := p.o.Interval
		if t.info.Load() != nil {
			d = p.o.Refresh
		}
		sctx, cancel := context.WithCancel(ctx)
		t.mu.Lock()
		if t.kicked {
			t.kicked = false
			cancel()
		}
		t.wake = cancel
		t.mu.Unlock()
		_ = p.o.Sleep(sctx, d)
		t.mu.Lock()
		t.wake = nil
		t.mu.Unlock()
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

func (p *Poller) poll(t *target) {
	status, body, err := getOnce(p.o.Client, t.url, p.o.Timeout)
	var info PrefillInfo
	switch {
	case err != nil:
		err = rootCause(err)
	case status != fasthttp.StatusOK:
		if reg, exp, ok := parseNotReady(body); ok {
			t.registered.Store(int64(reg))
			t.expected.Store(int64(exp))
		}
		err = fmt.Errorf("status %d: %s", status, clip(strings.TrimSpace(string(body)), 200))
	default:
		info, err = decodeSentinel(body)
	}
	if err != nil {
		t.mu.Lock()
		wasReady := t.info.Swap(nil) != nil
		if wasReady {
			t.readyCh = make(chan struct{})
		}
		t.mu.Unlock()
		if wasReady {
			p.log.Warn().Str("bootstrap_addr", t.addr).Err(err).Msg("prefill registry no longer ready")
		} else {
			p.log.Debug().Str("bootstrap_addr", t.addr).Err(err).Msg("prefill registry not ready")
		}
		return
	}
	n := int64(info.Ranks())
	t.registered.Store(n)
	t.expected.Store(n)
	t.mu.Lock()
	wasReady := t.info.Swap(&info) != nil
	if !wasReady {
		close(t.readyCh)
	}
	t.mu.Unlock()
	if !wasReady {
		p.log.Info().Str("bootstrap_addr", t.addr).Int("ranks", int(n)).Msg("prefill registry ready")
	}
}

// wakeNow makes the poll loop poll now instead of finishing its sleep.
func (t *target) wakeNow() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wake != nil {
		t.wake()
	} else {
		t.kicked = true
	}
}

func (t *target) readyChan() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.readyCh
}

func (p *Poller) target(addr string) *target { return (*p.targets.Load())[addr] }

// Ready implements Directory.
func (p *Poller) Ready(addr string) bool {
	t := p.target(addr)
	return t != nil && t.info.Load() != nil
}

// Info implements Directory.
func (p *Poller) Info(addr string) (PrefillInfo, bool) {
	if t := p.target(addr); t != nil {
		if i := t.info.Load(); i != nil {
			return *i, true
		}
	}
	return PrefillInfo{}, false
}

// WaitInfo implements Directory: it triggers an immediate poll and waits
// for the address to become ready or ctx to end.
func (p *Poller) WaitInfo(ctx context.Context, addr string) (PrefillInfo, error) {
	t := p.target(addr)
	if t == nil {
		return PrefillInfo{}, fmt.Errorf("prefill bootstrap %s: %w", addr, ErrUnknownPrefill)
	}
	for {
		if i := t.info.Load(); i != nil {
			return *i, nil
		}
		ch := t.readyChan()
		t.wakeNow()
		select {
		case <-ch:
		case <-ctx.Done():
			return PrefillInfo{}, fmt.Errorf("prefill bootstrap %s: %w (%s): %w", addr, ErrNotReady, countText(t.registered.Load(), t.expected.Load()), ctx.Err())
		}
	}
}

// Status implements Directory; for a not-ready registry the counts come
// from its 503 text when it gives them.
func (p *Poller) Status(addr string) (registered, expected int) {
	t := p.target(addr)
	if t == nil {
		return 0, 0
	}
	return int(t.registered.Load()), int(t.expected.Load())
}

// parseNotReady reads the counts from a 503 text: pdlb's "(k of N ranks
// registered)" or SGLang's "(k workers registered)" (expected unknown: 0).
func parseNotReady(body []byte) (registered, expected int, ok bool) {
	s := string(body)
	i := strings.LastIndexByte(s, '(')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, 0, false
	}
	reg, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, 0, false
	}
	if f[1] == "of" && len(f) >= 3 {
		exp, _ := strconv.Atoi(f[2]) // "?" → 0: unknown
		return reg, exp, true
	}
	return reg, 0, true
}
