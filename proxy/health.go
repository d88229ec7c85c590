package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
)

// healthPath is what SGLang engines answer 200 on while they can serve.
const healthPath = "/health"

// HealthChecker sends GET /health to every backend of a pool at a fixed
// interval and flips Backend.SetHealthy after consecutive-result thresholds,
// so one lost probe neither removes a backend nor one lucky answer restores it.
type HealthChecker struct {
	// OnResult, when set before Start, is told every check's outcome (metrics).
	// It is called from the checking goroutines, concurrently.
	OnResult func(b *Backend, ok bool)
	// DPSizes, when set before Start, also learns each healthy decode's DP
	// size from its /server_info until known (policy.dp_aware).
	DPSizes bool
	// EngineLoads, when set before Start, also reads each healthy
	// backend's own load every round (policy.power_of_two.engine_load).
	EngineLoads bool

	pool *Pool
	cfg  config.Health
	log  zerolog.Logger

	// newTicker makes the round clock; tests replace it to drive rounds by hand.
	newTicker func(time.Duration) (<-chan time.Time, func())

	// mu serialises rounds (CheckOnce from a test and the loop) and guards streaks.
	mu      sync.Mutex
	streaks map[*Backend]*streak

	startOnce sync.Once
	stopOnce  sync.Once
	stop      chan struct{}
	wg        sync.WaitGroup
}

// streak counts a backend's consecutive results of one kind.
type streak struct {
	fails, passes int
}

// NewHealthChecker builds a checker from a validated config (thresholds
// at least 1 and a positive timeout when the interval is); nothing runs
// until Start.
func NewHealthChecker(pool *Pool, cfg config.Health, log zerolog.Logger) *HealthChecker {
	return &HealthChecker{
		pool:      pool,
		cfg:       cfg,
		log:       log,
		newTicker: realTicker,
		streaks:   map[*Backend]*streak{},
		stop:      make(chan struct{}),
	}
}

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// Start runs a first round at once (a dead backend is found before traffic
// piles onto it) and then one round per interval. An interval of 0 disables
// checks: Start does nothing and every backend stays healthy.
func (h *HealthChecker) Start() {
	if h.cfg.Interval <= 0 {
		return
	}
	h.startOnce.Do(func() {
		h.wg.Add(1)
		go h.loop()
	})
}

// Stop ends the checks and waits for a round in progress (at most one
// check timeout). It may be called more than once.
func (h *HealthChecker) Stop() {
	h.stopOnce.Do(func() { close(h.stop) })
	h.wg.Wait()
}

func (h *HealthChecker) loop() {
	defer h.wg.Done()
	tick, stopTicker := h.newTicker(h.cfg.Interval)
	defer stopTicker()
	for {
		h.CheckOnce()
		// A round slower than the interval skips ticks rather than
		// stacking rounds: the ticker's channel holds one tick at most.
		select {
		case <-h.stop:
			return
		case <-tick:
		}
	}
}

// CheckOnce runs one round: every backend in the pool now (so backends
// added or removed at runtime are picked up) is checked concurrently, and
// the thresholds are applied when all answers are in.
func (h *HealthChecker) CheckOnce() {
	h.mu.Lock()
	defer h.mu.Unlock()
	prefill, decode := h.pool.Backends(Prefill), h.pool.Backends(Decode)
	all := make([]*Backend, 0, len(prefill)+len(decode))
	all = append(append(all, prefill...), decode...)
	causes := make([]string, len(all))
	var wg sync.WaitGroup
	for i, b := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			causes[i] = h.probe(b)
			if h.OnResult != nil {
				h.OnResult(b, causes[i] == "")
			}
			if causes[i] == "" && h.DPSizes && b.Role == Decode && b.DPSize() == 0 {
				learnDPSize(b, h.cfg.Timeout)
			}
			if causes[i] == "" && h.EngineLoads {
				learnEngineLoad(b, h.cfg.Timeout)
			}
		}()
	}
	wg.Wait()

	seen := make(map[*Backend]struct{}, len(all))
	for i, b := range all {
		seen[b] = struct{}{}
		h.apply(b, causes[i])
	}
	// Forget backends that left the pool so a re-added URL (a new *Backend)
	// starts from a clean streak and the map does not grow forever.
	for b := range h.streaks {
		if _, ok := seen[b]; !ok {
			delete(h.streaks, b)
		}
	}
}

// probe checks one backend and returns why it failed ("" when healthy).
func (h *HealthChecker) probe(b *Backend) string {
	res, err := b.Call("GET", healthPath, nil, h.cfg.Timeout)
	if err != nil {
		return err.Error()
	}
	if res.Status != 200 {
		return "answered " + strconv.Itoa(res.Status)
	}
	return ""
}

// apply updates b's streak with one result and flips its verdict when a
// threshold is reached; only transitions are logged, not every probe.
func (h *HealthChecker) apply(b *Backend, cause string) {
	s := h.streaks[b]
	if s == nil {
		s = &streak{}
		h.streaks[b] = s
	}
	if cause != "" {
		s.fails++
		s.passes = 0
		if s.fails >= h.cfg.FailThreshold && b.Healthy() {
			b.SetHealthy(false)
			h.log.Warn().Str("backend", b.URL).Str("role", b.Role.String()).Int("failures", s.fails).
				Str("cause", cause).Msg("health check failed: backend marked unhealthy")
		}
		return
	}
	s.passes++
	s.fails = 0
	if s.passes >= h.cfg.PassThreshold && !b.Healthy() {
		b.SetHealthy(true)
		h.log.Info().Str("backend", b.URL).Str("role", b.Role.String()).Int("passes", s.passes).
			Msg("health check passed: backend marked healthy")
	}
}
