package service

import (
	"context"

	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/proxy"
)

// share stores a worker being added (a.mu held, b built, not yet in the
// pool) for the other replicas; when the store refuses or fails, b is
// undone and the client answered (409: another replica has it; 503: etcd
// did not answer, nothing was added anywhere).
func (a *Admin) share(ctx *fasthttp.RequestCtx, b *proxy.Backend, req addRequest) bool {
	sctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	created, err := a.Shared.Add(sctx, b.Role, req.URL, req.BootstrapPort)
	if err == nil && created {
		return true
	}
	b.Close()
	if a.OnDrained != nil {
		a.OnDrained(b) // its registry namespace, if nobody else uses it
	}
	if err != nil {
		a.log.Warn().Err(err).Str("backend", req.URL).Msg("worker not added: the shared store (etcd) did not take it")
		pdlb.SetUnavailable(&ctx.Response, 1, "worker not added: the shared store (etcd) did not take it: "+err.Error())
		return false
	}
	pdlb.WriteError(ctx, fasthttp.StatusConflict, pdlb.ErrInvalidRequest,
		"url: "+req.URL+" is already a worker of the cluster (added through another replica); DELETE it first")
	return false
}

// unshare removes a worker from the shared store before it is drained
// here; ok false means the client was answered 503 and nothing changed.
func (a *Admin) unshare(ctx *fasthttp.RequestCtx, url string) (existed, ok bool) {
	sctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	existed, err := a.Shared.Remove(sctx, url)
	if err != nil {
		a.log.Warn().Err(err).Str("backend", url).Msg("worker not removed: the shared store (etcd) did not take it")
		pdlb.SetUnavailable(&ctx.Response, 1, "worker not removed: the shared store (etcd) did not take it: "+err.Error())
		return false, false
	}
	return existed, true
}

// Adopt adds a worker another replica added (the shared store's watch
// calls it); nil when the pool has that URL already.
func (a *Admin) Adopt(role proxy.Role, url string, bootstrapPort *int) (*proxy.Backend, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pool.Find(url) != nil {
		return nil, nil
	}
	b, err := a.build(url, role, bootstrapPort)
	if err != nil {
		return nil, err
	}
	a.pool.Add(b)
	a.forgetDrained(b.Key()) // serving again: no longer listed as drained
	return b, nil
}
