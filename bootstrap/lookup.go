package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb"
)

// lookupTimeout bounds one GET of a lookup or a poll: SGLang's own
// per-request timeout for the same GETs (§5).
const lookupTimeout = 5 * time.Second

// SentinelQuery is the GET /route query that asks for a prefill's parallel
// info rather than one rank.
const SentinelQuery = "prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"

// FetchPrefillInfo GETs the sentinel route of the registry at baseURL
// ("http://host:port"). A 503 (not fully registered) or a transport error
// is retried, sleeping interval between tries, at most attempts tries in
// all; then the error wraps ErrNotReady and quotes the last answer. Other
// statuses fail at once. The caller picks attempts (at least 1 is made)
// and interval (bootstrap.lookup_attempts and lookup_interval in pdlb's
// config); a nil client means a fresh one, a nil sleep pdlb.SleepContext.
func FetchPrefillInfo(ctx context.Context, client *fasthttp.Client, baseURL string, attempts int, interval time.Duration, sleep pdlb.SleepFunc) (PrefillInfo, error) {
	body, err := getPatiently(ctx, client, baseURL, SentinelQuery, "prefill info", attempts, interval, sleep)
	if err != nil {
		return PrefillInfo{}, err
	}
	info, err := decodeSentinel(body)
	if err != nil {
		return PrefillInfo{}, fmt.Errorf("prefill info from %s: %w", baseURL, err)
	}
	return info, nil
}

// FetchRank GETs one rank's address with the same patience; a 404 wraps
// ErrRankNotFound and is not retried.
func FetchRank(ctx context.Context, client *fasthttp.Client, baseURL string, attempts int, interval time.Duration, sleep pdlb.SleepFunc, dp, cp, tp, pp int) (RankInfo, error) {
	q := "prefill_dp_rank=" + strconv.Itoa(dp) + "&prefill_cp_rank=" + strconv.Itoa(cp) +
		"&target_tp_rank=" + strconv.Itoa(tp) + "&target_pp_rank=" + strconv.Itoa(pp)
	what := fmt.Sprintf("bootstrap info for dp=%d cp=%d tp=%d pp=%d", dp, cp, tp, pp)
	body, err := getPatiently(ctx, client, baseURL, q, what, attempts, interval, sleep)
	if err != nil {
		return RankInfo{}, err
	}
	var ri RankInfo
	if err := json.Unmarshal(body, &ri); err != nil || ri.RankIP == "" {
		return RankInfo{}, fmt.Errorf("%s from %s: malformed answer %q", what, baseURL, clip(string(body), 200))
	}
	return ri, nil
}

func getPatiently(ctx context.Context, client *fasthttp.Client, baseURL, query, what string, attempts int, interval time.Duration, sleep pdlb.SleepFunc) ([]byte, error) {
	attempts = max(attempts, 1)
	if sleep == nil {
		sleep = pdlb.SleepContext
	}
	if client == nil {
		client = newClient()
	}
	url := strings.TrimRight(baseURL, "/") + "/route?" + query
	var reason string
	for k := 1; ; k++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s from %s: %w", what, baseURL, err)
		}
		status, body, err := getOnce(client, url, lookupTimeout)
		switch {
		case err != nil:
			reason = rootCause(err).Error()
		case status == fasthttp.StatusOK:
			return body, nil
		case status == fasthttp.StatusNotFound:
			return nil, &msgError{fmt.Sprintf("%s from %s: %s", what, baseURL, clip(strings.TrimSpace(string(body)), 200)), ErrRankNotFound}
		case status != fasthttp.StatusServiceUnavailable:
			return nil, fmt.Errorf("%s from %s: status %d: %s", what, baseURL, status, clip(strings.TrimSpace(string(body)), 200))
		default:
			reason = clip(strings.TrimSpace(string(body)), 200)
		}
		if k >= attempts {
			return nil, &msgError{fmt.Sprintf("%s from %s not ready after %d attempts: %s", what, baseURL, attempts, reason), ErrNotReady}
		}
		if err := sleep(ctx, interval); err != nil {
			return nil, fmt.Errorf("%s from %s: %w", what, baseURL, err)
		}
	}
}

// getOnce does one GET; the body is copied out of fasthttp's pooled buffer.
func getOnce(client *fasthttp.Client, url string, timeout time.Duration) (int, []byte, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	req.Header.SetMethod(fasthttp.MethodGet)
	if err := client.DoTimeout(req, resp, timeout); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}
