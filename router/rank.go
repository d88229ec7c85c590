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

// dpRanks are the DP ranks a request is sent to: the prefill's (the
// client's, or dp_aware's pick) and the decode's own (dp_aware); -1 for
// none.
type dpRanks struct {
	prefill, decode int
}

const (
	keyRouted  = "routed_dp_rank"
	keyPrefill = "disagg_prefill_dp_rank"
)

// legs returns the injection of each leg: the prefill gets routed_dp_rank,
// the decode disagg_prefill_dp_rank and, when it is DP itself, its own
// routed_dp_rank. Without ranks both legs share in (one body for both).
func (k dpRanks) legs(in *injection) (prefill, decode *injection) {
	if k.prefill < 0 && k.decode < 0 {
		return in, in
	}
	p, d := *in, *in
	if k.prefill >= 0 {
		p.ranks[p.nranks] = rankMember{keyRouted, int64(k.prefill)}
		p.nranks++
		d.ranks[d.nranks] = rankMember{keyPrefill, int64(k.prefill)}
		d.nranks++
	}
	if k.decode >= 0 {
		d.ranks[d.nranks] = rankMember{keyRouted, int64(k.decode)}
		d.nranks++
	}
	return &p, &d
}

// pickDPRanks (policy.dp_aware) picks the least-loaded DP rank of the
// prefill, whose DP size its registry knows, and of the decode, whose DP
// size the health checks learnt from its /server_info, and counts the
// request on them until its tickets settle. A rank is -1 where the size is
// unknown or 1. It returns the prefill's DP size for the room (0: none).
func (r *Router) pickDPRanks(pt, dt *proxy.Ticket) (int, dpRanks) {
	ranks := dpRanks{prefill: -1, decode: -1}
	prefillDP := 0
	if pb := pt.Backend(); r.info != nil {
		if info, ok := r.info.Info(pb.Bootstrap().Addr); ok && info.DPSize > 1 {
			pb.SetDPSize(info.DPSize)
			// -1 when another request set another size meanwhile: then
			// no rank, as for a prefill of unknown size.
			if rank := pt.TakeLeastLoadedDPRank(info.DPSize); rank >= 0 {
				ranks.prefill, prefillDP = rank, info.DPSize
			}
		}
	}
	if n := dt.Backend().DPSize(); n > 1 {
		ranks.decode = dt.TakeLeastLoadedDPRank(n)
	}
	return prefillDP, ranks
}
