package bootstrap

import (
	"encoding/json"
	"errors"

	"github.com/valyala/fasthttp"

	"pdlb"
)

// handlePutRoute serves PUT /route: one prefill rank registers (§3.1).
// Unlike SGLang (500 on any bad input) a malformed body is a 400 naming the
// field and nothing is stored; a body whose role is not "Prefill" is
// accepted and ignored, as legacy servers did. Unlike SGLang (last write
// wins), a registered rank moves to another rank_ip only when w is vouched
// for (bootstrap.auth_token or bootstrap.allowed_sources); else 409 and
// nothing changes.
func (r *Registry) handlePutRoute(ns *Namespace, ctx *fasthttp.RequestCtx, w writer) {
	reg, err := parseRegistration(ctx.PostBody())
	if err == nil && reg != nil {
		var prev *RankInfo
		var becameReady bool
		if r.shared != nil {
			prev, becameReady, err = r.registerShared(ns, reg, w.vouched)
		} else {
			prev, becameReady, err = ns.register(reg, w.vouched)
		}
		if err == nil {
			r.logRegistration(ns, reg, prev, becameReady, w)
		}
	}
	var fe *fieldError
	var me *moveError
	switch {
	case errors.Is(err, ErrStoreUnavailable):
		r.storeUnavailable(ctx, ns, "PUT /route", w, err)
	case errors.As(err, &fe):
		r.log.Warn().Int("bootstrap_port", ns.port).Str("field", fe.Field).Str("peer", peerText(w.peer)).
			Msg("rejected prefill registration: " + fe.Msg)
		badRequest(ctx, fe)
	case errors.As(err, &me):
		r.log.Warn().Int("bootstrap_port", ns.port).Str("peer", peerText(w.peer)).
			Int("dp", me.key.dp).Int("cp", me.key.cp).Int("tp", me.key.tp).Int("pp", me.key.pp).
			Str("rank", me.from.addr()).Str("refused_rank", me.to.addr()).
			Msg("refused prefill registration moving a rank to another host")
		pdlb.WriteError(ctx, fasthttp.StatusConflict, pdlb.ErrInvalidRequest, me.Error())
	case err != nil: // not produced today; keep the handler 500-free if that changes
		badRequest(ctx, err)
	default:
		textOK(ctx)
	}
}

// logRegistration logs an accepted PUT; a replacement is a warn naming the
// address it replaced and the peer, so a rank that moved can be traced.
func (r *Registry) logRegistration(ns *Namespace, reg *registration, prev *RankInfo, becameReady bool, w writer) {
	ev := r.log.Info()
	if prev != nil {
		ev = r.log.Warn() // a rank restarted, or two ranks claim one slot
		ev.Str("previous", prev.addr()).Bool("moved", !sameHost(prev.RankIP, reg.rank.RankIP))
	}
	ev.Int("bootstrap_port", ns.port).Str("peer", peerText(w.peer)).
		Int("dp", reg.key.dp).Int("cp", reg.key.cp).Int("tp", reg.key.tp).Int("pp", reg.key.pp).
		Str("rank_ip", reg.rank.RankIP).Int("rank_port", reg.rank.RankPort).Bool("replaced", prev != nil).
		Int64("registered", ns.state.registered.Load()).Int64("expected", ns.state.expected.Load()).
		Msg("prefill rank registered")
	if becameReady {
		r.log.Info().Int("bootstrap_port", ns.port).Int64("ranks", ns.state.expected.Load()).Msg("prefill fully registered")
	}
}

// handleDeleteRoute serves DELETE /route, pdlb's admin reset: topology,
// ranks and DP-rank entries are forgotten and the namespace answers 503
// until the ranks register again. SGLang never resets (first write wins
// forever), so a prefill restarted with another layout needs this, or a
// pdlb restart. It passes admitWrite like every write; when neither
// bootstrap.auth_token nor bootstrap.allowed_sources is set it is further
// taken only from a loopback peer (an operator on the registry's machine,
// curl http://127.0.0.1:PORT/route -X DELETE), 403 otherwise: from
// anywhere, reset-then-register would be the way around the rule that a
// rank does not move to another host.
func (r *Registry) handleDeleteRoute(ns *Namespace, ctx *fasthttp.RequestCtx, w writer) {
	if !w.vouched && !w.peer.IsLoopback() {
		r.log.Warn().Int("bootstrap_port", ns.port).Str("peer", peerText(w.peer)).
			Msg("refused DELETE /route from a non-loopback peer: neither bootstrap.auth_token nor bootstrap.allowed_sources is set")
		pdlb.WriteError(ctx, fasthttp.StatusForbidden, pdlb.ErrPermission,
			"DELETE /route from "+peerText(w.peer)+" refused: without bootstrap.auth_token or bootstrap.allowed_sources "+
				"a namespace is reset only from a loopback peer (on the registry's own machine)")
		return
	}
	var n int
	if r.shared != nil {
		var err error
		if n, err = r.resetShared(ns); err != nil {
			r.storeUnavailable(ctx, ns, "DELETE /route", w, err)
			return
		}
	} else {
		n = ns.reset()
	}
	r.log.Info().Int("bootstrap_port", ns.port).Int("dropped_ranks", n).Str("peer", peerText(w.peer)).
		Msg("bootstrap namespace reset by DELETE /route")
	textOK(ctx)
}

// storeUnavailable answers a write the shared store did not take: 503 with
// Retry-After, so the registrant tries again (SGLang's registration client
// retries non-200 answers) and nothing is answered 200 that another
// replica would not know.
func (r *Registry) storeUnavailable(ctx *fasthttp.RequestCtx, ns *Namespace, what string, w writer, err error) {
	r.log.Warn().Int("bootstrap_port", ns.port).Str("peer", peerText(w.peer)).Err(err).
		Msg(what + " not taken: the shared registry store (etcd) did not answer in time")
	pdlb.SetUnavailable(&ctx.Response, 1, what+" not stored: "+err.Error())
}

// handleGetRoute serves GET /route in every supported era (see queryForms):
// the sentinel query returns the prefill's parallel info, any other returns
// one rank's address. Before all ranks registered both answer 503 with
// Retry-After: SGLang answers 503 since 2026-02-24, older servers answered
// a half-filled body or 500; a 503 is never worse for those decodes.
func (r *Registry) handleGetRoute(ns *Namespace, ctx *fasthttp.RequestCtx) {
	q := ctx.QueryArgs()
	form := detectForm(q)
	var raw [4][]byte
	var val [4]int64
	for i, name := range form.params {
		if name == "" {
			continue // this era has no such dimension; its rank is 0
		}
		raw[i] = q.Peek(name)
		if len(raw[i]) == 0 {
			textReply(ctx, fasthttp.StatusBadRequest, "Missing inputs for bootstrap server.")
			return
		}
		v, ok := pyInt(string(raw[i]))
		if !ok {
			badRequest(ctx, badField(name, "must be an integer, got %q", clip(string(raw[i]), 40)))
			return
		}
		val[i] = v
	}
	sentinel := true
	for i, name := range form.params {
		if name != "" && val[i] != -1 {
			sentinel = false
		}
	}
	s := ns.snap.Load()
	if s == nil {
		notReady(ctx, ns)
		return
	}
	if sentinel {
		jsonReply(ctx, fasthttp.StatusOK, form.sentinel(s, r.cfg.ExtendedSentinel))
		return
	}
	key, ok := toKey(val)
	if ri, found := ns.lookup(key); ok && found {
		body, _ := json.Marshal(ri)
		jsonReply(ctx, fasthttp.StatusOK, body)
		return
	}
	textReply(ctx, fasthttp.StatusNotFound, form.notFound(raw))
}

// toKey narrows parsed query values to a table key; values that cannot be a
// rank (negative beyond the sentinel, or huge) simply find nothing.
func toKey(v [4]int64) (rankKey, bool) {
	for _, x := range v {
		if x < 0 || x > maxSize {
			return rankKey{}, false
		}
	}
	return rankKey{dp: int(v[0]), cp: int(v[1]), tp: int(v[2]), pp: int(v[3])}, true
}
