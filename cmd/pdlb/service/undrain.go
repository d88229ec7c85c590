package service

import (
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
)

// drainedKept bounds how many finished drains the Admin remembers.
const drainedKept = 32

// DrainedWorker is a backend whose drain finished: what it takes to add it
// back as it was.
type DrainedWorker struct {
	Role          proxy.Role
	URL           string
	BootstrapPort *int
	At            time.Time
	key           string
}

// Drained lists the backends whose drain finished (and that were not added
// back since), oldest first.
func (a *Admin) Drained() []DrainedWorker {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.drained)
}

// Draining lists the backends still draining.
func (a *Admin) Draining() []*proxy.Backend {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*proxy.Backend, 0, len(a.draining))
	for b := range a.draining {
		out = append(out, b)
	}
	return out
}

// rememberDrained records b's finished drain (a.mu held).
func (a *Admin) rememberDrained(b *proxy.Backend) {
	a.forgetDrained(b.Key())
	if len(a.drained) == drainedKept {
		a.drained = slices.Delete(a.drained, 0, 1)
	}
	a.drained = append(a.drained, DrainedWorker{Role: b.Role, URL: b.URL, BootstrapPort: b.Bootstrap().Port, At: time.Now(), key: b.Key()})
}

// forgetDrained drops a finished drain of the backend with key (a.mu held):
// it is in the pool again.
func (a *Admin) forgetDrained(key string) {
	a.drained = slices.DeleteFunc(a.drained, func(d DrainedWorker) bool { return d.key == key })
}

// undrain answers POST /workers/undrain?url=…: a backend still draining
// goes back into the pool as it is (breaker, counters, connections); one
// whose drain finished is added again as POST /workers would (201); one
// in the pool is left alone (200).
func (a *Admin) undrain(ctx *fasthttp.RequestCtx) {
	raw := string(ctx.QueryArgs().Peek("url"))
	if raw == "" {
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "url: query parameter required (POST /workers/undrain?url=http://host:port)")
		return
	}
	u, err := config.ParseBackendURL(raw)
	if err != nil {
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "url: "+err.Error())
		return
	}
	key := u.Key()
	a.mu.Lock()
	defer a.mu.Unlock()
	if b := a.pool.Find(raw); b != nil {
		pdlb.WriteJSON(ctx, fasthttp.StatusOK, a.worker(b))
		return
	}
	for b, undrained := range a.draining {
		if b.Key() == key {
			delete(a.draining, b)
			close(undrained)
			b.Undrain()
			a.pool.Add(b)
			a.log.Info().Str("backend", b.URL).Str("role", b.Role.String()).Msg("worker undrained via admin API")
			pdlb.WriteJSON(ctx, fasthttp.StatusOK, a.worker(b))
			return
		}
	}
	for _, d := range a.drained {
		if d.key != key {
			continue
		}
		b, err := a.build(d.URL, d.Role, d.BootstrapPort)
		if err != nil {
			pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "url: "+err.Error())
			return
		}
		a.pool.Add(b)
		a.forgetDrained(key)
		a.log.Info().Str("backend", b.URL).Str("role", b.Role.String()).Msg("drained worker added back via admin API")
		pdlb.WriteJSON(ctx, fasthttp.StatusCreated, a.worker(b))
		return
	}
	pdlb.WriteError(ctx, fasthttp.StatusNotFound, pdlb.ErrNotFound,
		"url: no draining or drained worker "+raw+" (POST /workers adds one)")
}
