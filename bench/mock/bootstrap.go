package mock

// KV bootstrap behaviour, as real PD engines do it (sglang-wire-protocol.md
// §3–§5):
//   - a prefill with Options.Bootstrap PUTs /route once per rank (DP×TP,
//     cp = pp = 1) when it starts serving, through bootstrap.Registrar
//     (retries with backoff, §4), and dispatches each request to DP rank
//     routed_dp_rank, else bootstrap_room % DP;
//   - a decode with Options.Lookup resolves each request's prefill the way
//     SGLang's fixed decode does (§5): the address's parallel info (sentinel
//     GET, cached, patient with 503), then the prefill DP rank
//     (disagg_prefill_dp_rank, else 0 when dp_size is 1, else room %
//     dp_size), then the per-rank routes of every target TP rank (cached as
//     SGLang's connection_pool), failing the request with SGLang's messages
//     as HTTP 500 when it cannot.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
	"pdlb/config"
)

const (
	// fakeBootstrapHost is SGLang's FAKE_BOOTSTRAP_HOST: fake transfer
	// (warm-up, /health_generate), no registry involved.
	fakeBootstrapHost = "2.2.2.2"
	// defaultBootstrapPort is what a decode uses for a null bootstrap_port.
	defaultBootstrapPort = 8998
	// fakeRankPortBase numbers the ZMQ ports the mock's ranks pretend to
	// listen on; nothing connects to them.
	fakeRankPortBase = 20000
	// maxParallel caps DP and TP so a typo cannot spawn millions of ranks.
	maxParallel = 256
	// recentRooms is how many RoomRecords Stats keeps.
	recentRooms = 64
)

// RoomRecord is one bootstrap room an engine handled: for a prefill the DP
// rank it dispatched the room to, for a decode the prefill DP rank (and
// bootstrap address) it resolved.
type RoomRecord struct {
	Rid    string
	Room   uint64
	DPRank int
	// Addr is the bootstrap address a decode resolved ("" on a prefill).
	Addr string
}

// kvState is the engine's bootstrap state: registration outcome (prefill)
// and the lookup caches (decode).
type kvState struct {
	regOnce    sync.Once
	registered chan struct{}  // closed when every rank registered
	fatal      chan error     // the final failure, with FailFast
	failed     bool           // registration gave up (guarded by mu)
	wg         sync.WaitGroup // the registration goroutine, for Shutdown

	client *fasthttp.Client

	mu    sync.Mutex
	infos map[string]*infoEntry            // prefill parallel info per bootstrap address
	ranks map[rankRoute]bootstrap.RankInfo // SGLang's connection_pool
	rooms []RoomRecord                     // ring of the most recent rooms
	next  int
}

// infoEntry is one address's info, fetched once by whoever asked first
// while the others wait; a failed fetch is forgotten so the next request
// tries again.
type infoEntry struct {
	done chan struct{}
	info bootstrap.PrefillInfo
	err  error
}

// rankRoute keys the connection pool like SGLang: f"{addr}_{dp}_{cp}_{tp}" (+pp).
type rankRoute struct {
	addr           string
	dp, cp, tp, pp int
}

func (k *kvState) init() {
	k.registered = make(chan struct{})
	k.fatal = make(chan error, 1)
	k.client = &fasthttp.Client{NoDefaultUserAgentHeader: true, DialDualStack: true}
	k.infos = make(map[string]*infoEntry)
	k.ranks = make(map[rankRoute]bootstrap.RankInfo)
}

// Registered is closed once every rank of a prefill has registered with
// Options.Bootstrap. It never closes when registration gave up.
func (e *Engine) Registered() <-chan struct{} { return e.kv.registered }

// Fatal delivers the error that must stop the engine: with FailFast, the
// final registration failure (wrapping bootstrap.ErrRegistrationFailed).
// `pdlb mock` exits non-zero on it.
func (e *Engine) Fatal() <-chan error { return e.kv.fatal }

// kvActive reports whether requests need the bootstrap step's parsed fields.
func (e *Engine) kvActive() bool {
	if e.opts.Role == RolePrefill {
		return e.opts.DP > 1
	}
	return e.opts.Lookup
}

// kvBootstrap is the bootstrap step of every generation request.
func (e *Engine) kvBootstrap(ctx context.Context, r *Request) error {
	if e.opts.Role == RolePrefill {
		return e.dispatch(r)
	}
	if !e.opts.Lookup {
		return nil
	}
	return e.resolve(ctx, r)
}

// ---------------------------------------------------------------------------
// Prefill: registration and DP dispatch.

// startRegistration registers every rank in the background, once, from the
// first listener served (its port is the prefill_http_port).
func (e *Engine) startRegistration(addr net.Addr) {
	if e.opts.Role != RolePrefill || e.opts.Bootstrap == "" {
		return
	}
	e.kv.regOnce.Do(func() {
		port := 0
		if ta, ok := addr.(*net.TCPAddr); ok {
			port = ta.Port
		}
		e.kv.wg.Add(1)
		go func() {
			defer e.kv.wg.Done()
			e.register(port)
		}()
	})
}

func (e *Engine) register(httpPort int) {
	if err := e.opts.Sleep(e.ctx, e.opts.RegisterDelay); err != nil {
		return
	}
	// The mock decides what a final failure means itself (FailFast below), so
	// it asks the Registrar for the error in every case.
	reg := bootstrap.NewRegistrar(bootstrap.RegistrarOptions{
		URL:      e.opts.Bootstrap,
		Attempts: e.opts.RegisterAttempts,
		Initial:  e.opts.RegisterBackoff,
		Sleep:    e.opts.Sleep,
		Token:    e.opts.BootstrapToken,
		FailFast: true,
		Client:   e.kv.client,
		Logger:   e.log,
	})
	n := e.opts.DP * e.opts.TP
	errs := make([]error, n)
	var wg sync.WaitGroup
	// Ranks are separate processes in SGLang: they register concurrently.
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = reg.Register(e.ctx, e.rankPayload(i/e.opts.TP, i%e.opts.TP, i, httpPort))
		}()
	}
	wg.Wait()
	if e.ctx.Err() != nil {
		return // shut down meanwhile
	}
	var err error
	failed := 0
	for _, rerr := range errs {
		if rerr != nil {
			failed++
			if err == nil {
				err = rerr
			}
		}
	}
	if err == nil {
		e.log.Info().Str("bootstrap", e.opts.Bootstrap).Int("ranks", n).Msg("all prefill ranks registered")
		close(e.kv.registered)
		return
	}
	e.kv.mu.Lock()
	e.kv.failed = true
	e.kv.mu.Unlock()
	if !e.opts.FailFast {
		e.log.Error().Err(err).Int("failed_ranks", failed).Msg("mock prefill runs unregistered: no decode can find its KV")
		return
	}
	e.kv.fatal <- fmt.Errorf("mock prefill: %d of %d ranks not registered: %w", failed, n, err)
}

// rankPayload is rank (dp, tp)'s PUT /route body (§3.1).
func (e *Engine) rankPayload(dp, tp, i, httpPort int) bootstrap.RankRegistration {
	pageSize, dtype := 1, "auto"
	p := bootstrap.RankRegistration{
		AttnTPSize: e.opts.TP, AttnTPRank: tp,
		AttnCPSize: 1, AttnCPRank: 0,
		AttnDPSize: e.opts.DP, AttnDPRank: dp,
		PPSize: 1, PPRank: 0,
		SystemDPSize: 1, SystemDPRank: 0,
		RankIP:            "127.0.0.1",
		RankPort:          fakeRankPortBase + i,
		PageSize:          &pageSize,
		KVCacheDtype:      &dtype,
		LoadBalanceMethod: "follow_bootstrap_room",
	}
	if httpPort > 0 {
		p.PrefillHTTPPort = &httpPort
	}
	return p
}

// dispatch picks each item's DP rank as SGLang's follow_bootstrap_room
// scheduler does: routed_dp_rank when given, else room % DP. A routed rank
// that contradicts the room fails like SGLang without
// SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK (§3.4): the decode
// would look for the KV on the room's rank.
func (e *Engine) dispatch(r *Request) error {
	dp := uint64(e.opts.DP)
	for _, room := range r.BootstrapRooms {
		rank := int(room % dp)
		if rr := r.RoutedDPRank; rr != nil {
			if *rr < 0 || *rr >= e.opts.DP {
				return &StatusError{Code: fasthttp.StatusBadRequest, Message: "routed_dp_rank " + strconv.Itoa(*rr) +
					" is out of range [0, " + strconv.Itoa(e.opts.DP) + ")"}
			}
			if *rr != rank {
				return &StatusError{Code: fasthttp.StatusInternalServerError, Message: fmt.Sprintf(
					"follow_bootstrap_room conflict: dispatched to dp_rank %d but bootstrap_room %d implies dp_rank %d.", *rr, room, rank)}
			}
		}
		e.kv.record(RoomRecord{Rid: r.Rid, Room: room, DPRank: rank})
	}
	return nil
}

// ---------------------------------------------------------------------------
// Decode: resolving the prefill of each item.

func (e *Engine) resolve(ctx context.Context, r *Request) error {
	for i, room := range r.BootstrapRooms {
		host := item(r.BootstrapHosts, i)
		if host == fakeBootstrapHost {
			continue
		}
		if host == "" {
			return &StatusError{Code: fasthttp.StatusBadRequest, Message: "Invalid request: Disaggregated request received without bootstrap_host. req.rid='" + r.Rid + "'"}
		}
		port := item(r.BootstrapPorts, i)
		if port == 0 {
			port = defaultBootstrapPort
		}
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		info, err := e.prefillInfo(ctx, addr)
		if err != nil {
			e.log.Warn().Err(err).Str("bootstrap", addr).Msg("prefill parallel info unavailable")
			return &StatusError{Code: fasthttp.StatusInternalServerError, Message: fmt.Sprintf(
				"Could not fetch prefill parallel info from %s after %d attempts", addr, e.lookupAttempts())}
		}
		dp, err := prefillDPRank(info, r, room)
		if err != nil {
			return &StatusError{Code: fasthttp.StatusInternalServerError, Message: handshakeFailed(r.Rid, room, err.Error())}
		}
		// Across all decode ranks the targets are every prefill TP rank;
		// PP ranks are walked in reverse like SGLang's receiver.
		for tp := 0; tp < info.AttnTPSize; tp++ {
			for pp := info.PPSize - 1; pp >= 0; pp-- {
				if err := e.rankRoute(ctx, rankRoute{addr: addr, dp: dp, tp: tp, pp: pp}); err != nil {
					e.log.Warn().Err(err).Str("bootstrap", addr).Msg("prefill rank route unavailable")
					return &StatusError{Code: fasthttp.StatusInternalServerError, Message: handshakeFailed(r.Rid, room, fmt.Sprintf(
						"Could not fetch bootstrap info for: prefill_dp_rank: %d prefill_cp_rank: 0 target_tp_rank: %d and target_pp_rank %d", dp, tp, pp))}
				}
			}
		}
		e.kv.record(RoomRecord{Rid: r.Rid, Room: room, DPRank: dp, Addr: addr})
	}
	return nil
}

// prefillDPRank is SGLang's _resolve_prefill_dp_rank once info is cached.
func prefillDPRank(info bootstrap.PrefillInfo, r *Request, room uint64) (int, error) {
	switch {
	case r.PrefillDPRank != nil:
		return *r.PrefillDPRank, nil
	case info.DPSize == 1:
		return 0, nil
	case info.FollowBootstrapRoom:
		return int(room % uint64(info.DPSize)), nil
	}
	// SGLang would ask /query_dp_ranks and keep the request pending.
	return 0, errors.New("prefill does not follow bootstrap_room and the mock decode does not query /query_dp_ranks")
}

func handshakeFailed(rid string, room uint64, cause string) string {
	return fmt.Sprintf("Decode handshake failed for request rank=0 req.rid=%s req.bootstrap_room=%d with exception %s", rid, room, cause)
}

// prefillInfo returns addr's parallel info, fetching it once for all
// concurrent requests; failures are not cached.
func (e *Engine) prefillInfo(ctx context.Context, addr string) (bootstrap.PrefillInfo, error) {
	e.kv.mu.Lock()
	ent, ok := e.kv.infos[addr]
	if !ok {
		ent = &infoEntry{done: make(chan struct{})}
		e.kv.infos[addr] = ent
	}
	e.kv.mu.Unlock()
	if ok {
		select {
		case <-ent.done:
			return ent.info, ent.err
		case <-ctx.Done():
			return bootstrap.PrefillInfo{}, ctx.Err()
		}
	}
	ent.info, ent.err = bootstrap.FetchPrefillInfo(ctx, e.kv.client, "http://"+addr, e.lookupAttempts(), e.lookupInterval(), e.opts.Sleep)
	if ent.err != nil {
		e.kv.mu.Lock()
		delete(e.kv.infos, addr)
		e.kv.mu.Unlock()
	}
	close(ent.done)
	return ent.info, ent.err
}

// rankRoute makes sure k's route is in the connection pool.
func (e *Engine) rankRoute(ctx context.Context, k rankRoute) error {
	e.kv.mu.Lock()
	_, ok := e.kv.ranks[k]
	e.kv.mu.Unlock()
	if ok {
		return nil
	}
	ri, err := bootstrap.FetchRank(ctx, e.kv.client, "http://"+k.addr, e.lookupAttempts(), e.lookupInterval(), e.opts.Sleep, k.dp, k.cp, k.tp, k.pp)
	if err != nil {
		return err
	}
	e.kv.mu.Lock()
	e.kv.ranks[k] = ri
	e.kv.mu.Unlock()
	return nil
}

// lookupAttempts and lookupInterval are the options', or pdlb's defaults
// (bootstrap.lookup_attempts, bootstrap.lookup_interval) when unset.
func (e *Engine) lookupAttempts() int {
	if e.opts.LookupAttempts > 0 {
		return e.opts.LookupAttempts
	}
	return config.Default().Bootstrap.LookupAttempts
}

func (e *Engine) lookupInterval() time.Duration {
	if e.opts.LookupInterval > 0 {
		return e.opts.LookupInterval
	}
	return config.Default().Bootstrap.LookupInterval
}

func (k *kvState) record(rec RoomRecord) {
	k.mu.Lock()
	if len(k.rooms) < recentRooms {
		k.rooms = append(k.rooms, rec)
	} else {
		k.rooms[k.next] = rec
	}
	k.next = (k.next + 1) % recentRooms
	k.mu.Unlock()
}

// resetRooms forgets the recorded rooms.
func (k *kvState) resetRooms() {
	k.mu.Lock()
	k.rooms, k.next = k.rooms[:0], 0
	k.mu.Unlock()
}

// snapshot returns the recorded rooms oldest first and the registration state.
func (k *kvState) snapshot() (rooms []RoomRecord, registered, failed bool) {
	k.mu.Lock()
	if len(k.rooms) < recentRooms {
		rooms = append(rooms, k.rooms...)
	} else {
		rooms = append(append(rooms, k.rooms[k.next:]...), k.rooms[:k.next]...)
	}
	failed = k.failed
	k.mu.Unlock()
	select {
	case <-k.registered:
		registered = true
	default:
	}
	return rooms, registered, failed
}

func item[T any](list []T, i int) T {
	var zero T
	if i < len(list) {
		return list[i]
	}
	return zero
}
