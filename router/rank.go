package router

import (
	"context"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
	"pdlb/proxy"
)

// InfoSource answers what the DP-rank rule needs of a prefill: its cached
// parallel info, or (slow path) the info once it is there. The registry
// (embedded) and the poller (external) implement it.
type InfoSource interface {
	Info(addr string) (bootstrap.PrefillInfo, bool)
	WaitInfo(ctx context.Context, addr string) (bootstrap.PrefillInfo, error)
}

// checkRank applies the DP-rank rule to a request that names a prefill DP
// rank. It returns the prefill's DP size (0: no rank to honour), or a
// refusal status and message. The rank is checked only against cached
// info; when none is cached yet, the slow path waits for it (bounded), so
// the very first request of a fresh deployment succeeds.
func (r *Router) checkRank(p *proxy.Backend, req *pdRequest, deadline time.Time) (int, int, string) {
	addr := p.Bootstrap().Addr
	if req.rankField == "" || r.info == nil || addr == "" {
		return 0, 0, ""
	}
	info, ok := r.info.Info(addr)
	if !ok {
		// bootstrap.info_wait bounds the wait (0: no wait).
		c, cancel := context.WithDeadline(context.Background(), earliest(r.clock.Now().Add(r.cfg().InfoWait), deadline))
		var err error
		info, err = r.info.WaitInfo(c, addr)
		cancel()
		if err != nil {
			return 0, fasthttp.StatusServiceUnavailable, "parallel info of prefill " + p.URL + " not available yet: " + err.Error()
		}
	}
	dp := info.DPSize
	if req.prefillRank < 0 || req.prefillRank >= int64(dp) {
		return 0, fasthttp.StatusBadRequest, req.rankField + ": " + strconv.FormatInt(req.prefillRank, 10) +
			" is out of range [0, " + strconv.Itoa(dp) + ") for prefill " + p.URL
	}
	return dp, 0, ""
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
