package bootstrap

import (
	"net/netip"

	"github.com/valyala/fasthttp"

	"pdlb"
)

// writer is what admitWrite learned about an admitted write.
type writer struct {
	// peer is the TCP peer (see peerAddr).
	peer netip.Addr
	// vouched is true when something beyond reachability speaks for the
	// writer: bootstrap.auth_token is set (so the write carried it) or
	// bootstrap.allowed_sources is (so the peer is in it). An unvouched
	// writer may register ranks, as with SGLang, but not move a registered
	// rank to another host nor reset the namespace from another machine.
	vouched bool
}

// admitWrite admits a registry write (PUT and DELETE /route, POST
// /register_dp_rank) or answers and returns false: 403 when
// bootstrap.allowed_sources is set and the TCP peer is outside it, then
// 401 when bootstrap.auth_token is set and the write lacks it. The source
// is checked first, so a peer that may not write at all learns nothing
// about the token. Reads (GET, POST /query_dp_ranks) never come here,
// because decodes cannot authenticate and read from wherever they run.
//
// Released SGLang engines send no Authorization header: a token only works
// with registrants that send it (pdlb's Registrar and mock engines, or a
// sidecar). SGLang PR #39416 (unmerged in September 2026) would send
// "Authorization: Bearer <SGLANG_DISAGGREGATION_BOOTSTRAP_AUTH_TOKEN>".
// allowed_sources needs nothing from the engine.
func (r *Registry) admitWrite(ns *Namespace, ctx *fasthttp.RequestCtx) (writer, bool) {
	w := writer{peer: peerAddr(ctx), vouched: r.sources.set || r.auth.Enabled()}
	if r.sources.set && !r.sources.allows(w.peer) {
		r.log.Warn().Int("bootstrap_port", ns.port).Str("peer", peerText(w.peer)).
			Str("method", string(ctx.Method())).Str("path", string(ctx.Path())).
			Msg("refused registry write: peer not in bootstrap.allowed_sources")
		pdlb.WriteError(ctx, fasthttp.StatusForbidden, pdlb.ErrPermission,
			"registry writes are taken only from bootstrap.allowed_sources; peer "+peerText(w.peer)+" is not in it")
		return w, false
	}
	return w, r.auth.Check(ctx)
}

// peerText renders a peer for logs and refusals.
func peerText(a netip.Addr) string {
	if !a.IsValid() {
		return "(no IP address)"
	}
	return a.String()
}
