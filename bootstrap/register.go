package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
)

// RankRegistration is the PUT /route payload of one prefill rank, every
// key of protocol doc §3.1.
type RankRegistration struct {
	AttnTPSize   int    `json:"attn_tp_size"`
	AttnTPRank   int    `json:"attn_tp_rank"`
	AttnCPSize   int    `json:"attn_cp_size"`
	AttnCPRank   int    `json:"attn_cp_rank"`
	AttnDPSize   int    `json:"attn_dp_size"`
	AttnDPRank   int    `json:"attn_dp_rank"`
	PPSize       int    `json:"pp_size"`
	PPRank       int    `json:"pp_rank"`
	SystemDPSize int    `json:"system_dp_size"`
	SystemDPRank int    `json:"system_dp_rank"`
	RankIP       string `json:"rank_ip"`
	RankPort     int    `json:"rank_port"`
	// PageSize is required by SGLang servers (null → 500 there).
	PageSize     *int    `json:"page_size"`
	KVCacheDtype *string `json:"kv_cache_dtype"`
	// LoadBalanceMethod "" is omitted, which servers read as follow_bootstrap_room.
	LoadBalanceMethod        string `json:"load_balance_method,omitempty"`
	EnableDSACacheLayerSplit bool   `json:"enable_dsa_cache_layer_split"`
	PrefillHTTPPort          *int   `json:"prefill_http_port"`
}

// RegistrarOptions configures a Registrar. Zero values take the defaults
// noted, which are SGLang's (§4).
type RegistrarOptions struct {
	// URL of the bootstrap server, e.g. "http://127.0.0.1:8998"; "/route" is
	// appended unless present. Required.
	URL string
	// Attempts in total, the first included. Default 5.
	Attempts int
	// Initial delay before the second attempt. Default 1s.
	Initial time.Duration
	// Max caps the un-jittered delay. Default 30s.
	Max time.Duration
	// Jitter returns the factor j in [0.75, 1.0) applied to each delay;
	// values outside [0.75, 1] are clamped. Default 0.75 + 0.25·rand.
	Jitter func() float64
	// Sleep waits between attempts. Default pdlb.SleepContext.
	Sleep pdlb.SleepFunc
	// Timeout of one PUT. Default 5s (SGLang's requests timeout).
	Timeout time.Duration
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string
	// FailFast makes Register return an error wrapping ErrRegistrationFailed
	// when every attempt failed. Default false, matching SGLang: log the
	// failure at error and return nil, leaving the engine running
	// unregistered. SGLang chose that so a slow registry never kills a
	// loaded model; the price is an instance that looks alive but whose KV
	// no decode can find, so every request routed to it fails until someone
	// reads the log. Choose true under an orchestrator that restarts failed
	// processes: a crash is a visible, self-healing signal.
	FailFast bool
	// Client sends the PUTs. Default a new fasthttp.Client.
	Client *fasthttp.Client
	// Logger receives one warn per failed attempt and an error at the end.
	Logger zerolog.Logger
}

// Registrar registers prefill ranks with retry, exponential backoff and
// jitter: SGLang's fix for prefills that start before their registry (§4).
type Registrar struct {
	o   RegistrarOptions
	url string
}

// NewRegistrar applies defaults to o.
func NewRegistrar(o RegistrarOptions) *Registrar {
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.Initial <= 0 {
		o.Initial = time.Second
	}
	if o.Max <= 0 {
		o.Max = 30 * time.Second
	}
	if o.Jitter == nil {
		o.Jitter = func() float64 { return 0.75 + 0.25*rand.Float64() }
	}
	if o.Sleep == nil {
		o.Sleep = pdlb.SleepContext
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Client == nil {
		o.Client = newClient()
	}
	u := strings.TrimRight(o.URL, "/")
	if !strings.HasSuffix(u, "/route") {
		u += "/route"
	}
	return &Registrar{o: o, url: u}
}

// Delay is the wait before retry k (k = 0 after the first failure):
// min(Initial·2^k, Max) × Jitter().
func (r *Registrar) Delay(k int) time.Duration {
	d := r.o.Initial
	for i := 0; i < k && d < r.o.Max; i++ {
		d *= 2
	}
	d = min(d, r.o.Max)
	j := min(max(r.o.Jitter(), 0.75), 1.0)
	return time.Duration(float64(d) * j)
}

// Register PUTs p until the server answers 200, at most Attempts times,
// sleeping Delay(k) between attempts (never after the last). It returns nil
// on success, ctx's error if ctx ends first, and after the last failure an
// error wrapping ErrRegistrationFailed only when FailFast is set.
func (r *Registrar) Register(ctx context.Context, p RankRegistration) error {
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("bootstrap registration payload: %w", err)
	}
	var reason string
	for k := 0; k < r.o.Attempts; k++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bootstrap registration to %s: %w", r.url, err)
		}
		reason = r.attempt(body)
		if reason == "" {
			r.o.Logger.Info().Str("url", r.url).Int("attempt", k+1).
				Int("dp", p.dpGroup()).Int("tp", p.AttnTPRank).Int("cp", p.AttnCPRank).Int("pp", p.PPRank).
				Msg("prefill rank registered to bootstrap server")
			return nil
		}
		r.o.Logger.Warn().Str("url", r.url).Msgf("Prefill register attempt %d/%d failed: %s", k+1, r.o.Attempts, reason)
		if k == r.o.Attempts-1 {
			break
		}
		if err := r.o.Sleep(ctx, r.Delay(k)); err != nil {
			return fmt.Errorf("bootstrap registration to %s: %w", r.url, err)
		}
	}
	r.o.Logger.Error().Str("url", r.url).Str("last_error", reason).Bool("fail_fast", r.o.FailFast).
		Msgf("Prefill instance failed to register to bootstrap server after %d retries", r.o.Attempts)
	if !r.o.FailFast {
		return nil
	}
	return fmt.Errorf("%w: %s after %d attempts: %s", ErrRegistrationFailed, r.url, r.o.Attempts, reason)
}

// attempt does one PUT; "" means success, else the reason for the log.
func (r *Registrar) attempt(body []byte) string {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(r.url)
	req.Header.SetMethod(fasthttp.MethodPut)
	req.Header.SetContentType("application/json")
	if r.o.Token != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+r.o.Token)
	}
	req.SetBody(body)
	if err := r.o.Client.DoTimeout(req, resp, r.o.Timeout); err != nil {
		return rootCause(err).Error()
	}
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		return fmt.Sprintf("status %d: %s", code, clip(strings.TrimSpace(string(resp.Body())), 200))
	}
	return ""
}

// dpGroup is the rank's DP group as the registry keys it (§3.1): the
// attention DP rank unless the system runs several DP engines.
func (p RankRegistration) dpGroup() int {
	if p.SystemDPSize <= 1 {
		return p.AttnDPRank
	}
	return p.SystemDPRank
}
