package service

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/bootstrap"
	"pdlb/proxy"
	"pdlb/router"
)

// statusHTML is the status page: one file of HTML, CSS and JavaScript,
// with nothing fetched from elsewhere, so it works without internet.
//
//go:embed statuspage/index.html
var statusHTML []byte

// statusCSP allows the page its own inline script (by digest) and style,
// and requests to the admin listener only: the page shows strings that
// backends control (error causes), and this keeps any that slipped past its
// escaping from running or loading anything.
var statusCSP = func() string {
	script := statusHTML
	if i := bytes.Index(script, []byte("<script>")); i >= 0 {
		script = script[i+len("<script>"):]
	}
	if i := bytes.Index(script, []byte("</script>")); i >= 0 {
		script = script[:i]
	}
	sum := sha256.Sum256(script)
	return "default-src 'none'; connect-src 'self'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-" +
		base64.StdEncoding.EncodeToString(sum[:]) + "'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

// statusPage serves the status page on the admin listener: GET / is the
// page (open: it holds no data, and a browser cannot send a bearer token
// when it navigates), GET /status.json its data (admin.api_key required).
// The page polls the data once a second.
type statusPage struct {
	sampler *statusSampler
	pool    *proxy.Pool
	admin   *Admin
	router  *router.Router
	metrics *router.Metrics
	dir     bootstrap.Directory // nil without a registry
	now     func() time.Time
}

// serves reports whether path is one of the status page's.
func (p *statusPage) serves(path string) bool { return path == "/" || path == "/status.json" }

// handle answers GET (or HEAD) / and /status.json; other methods are a 405.
func (p *statusPage) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET")
		pdlb.WriteError(ctx, fasthttp.StatusMethodNotAllowed, pdlb.ErrInvalidRequest,
			"method "+string(ctx.Method())+" not allowed on "+path+"; use GET")
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	if path == "/" {
		ctx.Response.Header.Set("Content-Security-Policy", statusCSP)
		ctx.Response.Header.Set("Referrer-Policy", "no-referrer")
		ctx.SetContentType("text/html; charset=utf-8")
		ctx.SetBody(statusHTML)
		return
	}
	if !p.admin.authorized(ctx) {
		return
	}
	pdlb.WriteJSON(ctx, fasthttp.StatusOK, p.snapshot())
}

// statusJSON is GET /status.json.
type statusJSON struct {
	Time time.Time `json:"time"`
	// RateWindowS and TTFTWindowS are the seconds rates and percentiles
	// look back.
	RateWindowS float64         `json:"rate_window_s"`
	TTFTWindowS float64         `json:"ttft_window_s"`
	Totals      statusTotals    `json:"totals"`
	Backends    []statusBackend `json:"backends"`
	// AvoidedPairs are the prefill–decode pairs pair health avoids now.
	AvoidedPairs []statusPair  `json:"avoided_pairs"`
	Errors       []statusError `json:"errors"`
}

type statusPair struct {
	Prefill string `json:"prefill"`
	Decode  string `json:"decode"`
	// AvoidedForS is the seconds until the pair is tried again.
	AvoidedForS float64 `json:"avoided_for_s"`
}

type statusTotals struct {
	// ReqPerS is requests answered per second by status class ("2xx", …).
	ReqPerS       map[string]float64 `json:"req_per_s"`
	ActiveStreams int64              `json:"active_streams"`
	Admission     statusAdmission    `json:"admission"`
}

type statusAdmission struct {
	// Limit is limits.max_concurrent_requests (0: admission control off).
	Limit    int    `json:"limit"`
	InFlight int    `json:"in_flight"`
	Queued   int    `json:"queued"`
	Refused  uint64 `json:"refused"` // since start (429 and 503)
}

type statusBackend struct {
	Role string `json:"role"`
	URL  string `json:"url"`
	// State is "serving", "draining" (in-flight requests finishing) or
	// "drained" (out of the pool; undrain adds it back).
	State   string `json:"state"`
	Healthy bool   `json:"healthy"`
	Breaker string `json:"breaker"`
	// HalfOpenInS is the seconds until an open breaker admits a probe.
	HalfOpenInS *float64 `json:"half_open_in_s,omitempty"`
	// Registry is a prefill's bootstrap registry namespace (absent for
	// decodes and with bootstrap.mode off).
	Registry  *statusRegistry `json:"registry,omitempty"`
	InFlight  int64           `json:"in_flight"`
	ReqPerS   float64         `json:"req_per_s"`
	ErrorRate *float64        `json:"error_rate"`
	TTFTP50S  *float64        `json:"ttft_p50_s"`
	TTFTP99S  *float64        `json:"ttft_p99_s"`
	// ReqPerSHistory is legs per second for each second of the last
	// minute, oldest first (the sparkline).
	ReqPerSHistory []float64 `json:"req_per_s_history"`
}

type statusRegistry struct {
	Ready      bool `json:"ready"`
	Registered int  `json:"registered"`
	Expected   int  `json:"expected"` // 0: not known yet
}

type statusError struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	Route     string    `json:"route"`
	Status    int       `json:"status"`
	Cause     string    `json:"cause"`
	Prefill   string    `json:"prefill,omitempty"`
	Decode    string    `json:"decode,omitempty"`
}

// snapshot assembles the page's data: live state (health, breakers, in
// flight) read now, rates and percentiles from the sampler's ring.
func (p *statusPage) snapshot() statusJSON {
	now := p.now()
	out := statusJSON{Time: now, RateWindowS: rateWindow.Seconds(), TTFTWindowS: ttftWindow.Seconds(),
		Backends: []statusBackend{}, AvoidedPairs: []statusPair{}, Errors: []statusError{}}
	classes := p.sampler.classRates()
	out.Totals.ReqPerS = map[string]float64{}
	for i := 1; i < len(classes); i++ {
		out.Totals.ReqPerS[strconv.Itoa(i)+"xx"] = classes[i]
	}
	out.Totals.ActiveStreams = p.router.ActiveStreams()
	adm := p.router.Admission()
	out.Totals.Admission = statusAdmission{Limit: p.router.Settings().Limits.MaxConcurrentRequests,
		InFlight: adm.InFlight(), Queued: adm.Queued(),
		Refused: p.metrics.Counter(`pdlb_admission_refused_total{status="429"}`).Get() +
			p.metrics.Counter(`pdlb_admission_refused_total{status="503"}`).Get()}

	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		for _, b := range p.pool.Backends(role) {
			out.Backends = append(out.Backends, p.backend(b, "serving", now))
		}
	}
	draining := p.admin.Draining()
	slices.SortFunc(draining, func(a, b *proxy.Backend) int { return strings.Compare(a.URL, b.URL) })
	for _, b := range draining {
		out.Backends = append(out.Backends, p.backend(b, "draining", now))
	}
	for _, d := range p.admin.Drained() {
		sb := statusBackend{Role: d.Role.String(), URL: d.URL, State: "drained", Breaker: "-", ReqPerSHistory: []float64{}}
		out.Backends = append(out.Backends, sb)
	}

	for _, ap := range p.router.AvoidedPairs() {
		out.AvoidedPairs = append(out.AvoidedPairs, statusPair{ap.Prefill, ap.Decode, max(0, ap.Until.Sub(now).Seconds())})
	}
	for _, e := range p.router.RecentErrors() {
		se := statusError{Time: e.Time, RequestID: e.RequestID, Route: e.Route, Status: e.Status, Prefill: e.Prefill, Decode: e.Decode}
		if e.Cause != nil {
			se.Cause = e.Cause.Error()
		}
		out.Errors = append(out.Errors, se)
	}
	return out
}

func (p *statusPage) backend(b *proxy.Backend, state string, now time.Time) statusBackend {
	r := p.sampler.rates(backendID{b.Role, b.URL})
	sb := statusBackend{
		Role: b.Role.String(), URL: b.URL, State: state, Healthy: b.Healthy(), Breaker: "disabled",
		InFlight: b.InFlight(), ReqPerS: r.reqPerS, ErrorRate: r.errorRate, TTFTP50S: r.p50, TTFTP99S: r.p99,
		ReqPerSHistory: r.reqPerSHist,
	}
	if br := b.Breaker(); br != nil {
		sb.Breaker = br.State().String()
		if until := br.OpenUntil(); !until.IsZero() && sb.Breaker == "open" {
			v := max(0, until.Sub(now).Seconds())
			sb.HalfOpenInS = &v
		}
	}
	if b.Role == proxy.Prefill && p.dir != nil { // bootstrap.mode off: no registry to show
		reg := &statusRegistry{Ready: p.pool.RegistryReady(b)}
		if addr := b.Bootstrap().Addr; addr != "" {
			reg.Registered, reg.Expected = p.dir.Status(addr)
		}
		sb.Registry = reg
	}
	return sb
}
