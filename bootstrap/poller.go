package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
)

// PollerOptions configures a Poller.
type PollerOptions struct {
	// Interval between polls while a registry is not ready
	// (bootstrap.poll_interval). Required.
	Interval time.Duration
	// Refresh between polls once ready (pdlb passes health.interval).
	// Required.
	Refresh time.Duration
	// Clock tells the time and waits between polls; zero fields are the
	// system's.
	Clock pdlb.Clock
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

	targets pdlb.CopyOnWrite[map[string]*target]
}

type target struct {
	addr, url string
	cancel    context.CancelFunc
	state     *readiness

	mu     sync.Mutex
	wake   context.CancelFunc // ends the current sleep early
	kicked bool               // a wake came while no sleep was running
}

// NewPoller returns a Poller with no addresses; Close stops it. Each poll
// is one GET bounded by SGLang's own lookup timeout (5 s).
func NewPoller(o PollerOptions, log zerolog.Logger) *Poller {
	o.Clock = o.Clock.OrSystem()
	if o.Client == nil {
		o.Client = newClient()
	}
	p := &Poller{o: o, log: log.With().Str("component", "bootstrap-poller").Logger()}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// Add starts polling the registry at addr ("host:port", IPv6 bracketed); a
// no-op if it is polled already or the Poller is closed.
func (p *Poller) Add(addr string) {
	p.targets.Update(func(m map[string]*target) (map[string]*target, bool) {
		if _, ok := m[addr]; ok || p.ctx.Err() != nil {
			return m, false
		}
		ctx, cancel := context.WithCancel(p.ctx)
		t := &target{addr: addr, url: "http://" + addr + "/route?" + SentinelQuery, cancel: cancel, state: newReadiness()}
		p.wg.Add(1)
		go p.run(ctx, t)
		return pdlb.WithKey(m, addr, t), true
	})
}

// Remove stops polling addr and forgets its info.
func (p *Poller) Remove(addr string) {
	p.targets.Update(func(m map[string]*target) (map[string]*target, bool) {
		t, ok := m[addr]
		if !ok {
			return m, false
		}
		t.cancel()
		return pdlb.WithoutKey(m, addr), true
	})
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
		if t.state.ready() {
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
		_ = p.o.Clock.Sleep(sctx, d)
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
	status, body, err := getOnce(p.o.Client, t.url, lookupTimeout)
	var info PrefillInfo
	switch {
	case err != nil:
		err = rootCause(err)
	case status != fasthttp.StatusOK:
		if reg, exp, ok := parseNotReady(body); ok {
			t.state.setCounts(reg, exp)
		}
		err = fmt.Errorf("status %d: %s", status, clip(strings.TrimSpace(string(body)), 200))
	default:
		info, err = decodeSentinel(body)
	}
	now := p.o.Clock.Now()
	if err != nil {
		t.state.setNotReady()
		if log, unreadyFor := t.state.reportUnready(now); log {
			p.log.Warn().Str("bootstrap_addr", t.addr).Str("cause", err.Error()).Dur("unready_for", unreadyFor).
				Int64("registered", t.state.registered.Load()).Int64("expected", t.state.expected.Load()).
				Msg("prefill registry not ready: requests are not routed to this prefill")
		}
		return
	}
	wasUnready := t.state.clearUnready(now)
	n := info.Ranks()
	t.state.setCounts(n, n)
	if t.state.setReady(&info) {
		p.log.Info().Str("bootstrap_addr", t.addr).Int("ranks", n).Dur("unready_for", wasUnready).Msg("prefill registry ready")
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

// stateOf is addr's readiness; nil when addr is not polled.
func (p *Poller) stateOf(addr string) *readiness {
	if t := p.targets.Load()[addr]; t != nil {
		return t.state
	}
	return nil
}

// Ready implements Directory.
func (p *Poller) Ready(addr string) bool { return p.stateOf(addr).ready() }

// Info implements Directory.
func (p *Poller) Info(addr string) (PrefillInfo, bool) { return p.stateOf(addr).current() }

// Status implements Directory; for a not-ready registry the counts come
// from its 503 text when it gives them.
func (p *Poller) Status(addr string) (registered, expected int) { return p.stateOf(addr).status() }

// WaitInfo implements Directory: it polls at once and waits for the
// address to become ready or ctx to end.
func (p *Poller) WaitInfo(ctx context.Context, addr string) (PrefillInfo, error) {
	t := p.targets.Load()[addr]
	if t == nil {
		return (*readiness)(nil).wait(ctx, addr, nil)
	}
	return t.state.wait(ctx, addr, t.wakeNow)
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
