package proxy

import (
	"strings"
	"sync/atomic"

	"pdlb/config"
)

// EngineAuth is the credentials pdlb presents to engines started with
// SGLang's --api-key or --admin-api-key (upstream_auth). SGLang guards
// three kinds of route (srt/utils/auth.py): /health* and /metrics stay
// open; the serving and info routes need the api key when one is set; the
// admin routes (/abort_request, /flush_cache, …) need the admin key when
// one is set, else the api key. pdlb sends the admin key on its own aborts
// and on what an operator asks its admin listener for (CallAsAdmin) only:
// a /flush_cache a client asks the serving listener for goes with the api
// key, so an engine that keeps its admin routes to --admin-api-key holders
// refuses it (pdlb cannot tell whether its client is one). One EngineAuth is shared by
// every backend and swapped whole on reload; a nil *EngineAuth sends
// nothing.
type EngineAuth struct {
	keys atomic.Pointer[engineKeys]
}

type engineKeys struct {
	// api and admin are Authorization values ("Bearer <key>"), "" for none.
	api, admin string
	// legLine is the api key's header line for a leg's hand-written head.
	legLine []byte
}

// NewEngineAuth puts c in force.
func NewEngineAuth(c config.UpstreamAuth) *EngineAuth {
	a := &EngineAuth{}
	a.Set(c)
	return a
}

// Set puts c in force for the next leg and call.
func (a *EngineAuth) Set(c config.UpstreamAuth) {
	k := &engineKeys{}
	if c.APIKey != "" {
		k.api = "Bearer " + c.APIKey
		k.legLine = []byte("Authorization: " + k.api + "\r\n")
	}
	k.admin = k.api
	if c.AdminAPIKey != "" {
		k.admin = "Bearer " + c.AdminAPIKey
	}
	a.keys.Store(k)
}

func (a *EngineAuth) load() *engineKeys {
	if a == nil {
		return nil
	}
	return a.keys.Load()
}

// legHeader is the header line a leg to a serving route carries (nil: none).
func (a *EngineAuth) legHeader() []byte {
	if k := a.load(); k != nil {
		return k.legLine
	}
	return nil
}

// authorization is the Authorization value of a call to path ("": none).
func (a *EngineAuth) authorization(path string) string {
	k := a.load()
	switch {
	case k == nil, strings.HasPrefix(path, "/health"), strings.HasPrefix(path, "/metrics"):
		// Open on every engine: a key would only travel further than needed.
		return ""
	}
	return k.api
}

// adminAuthorization is the admin key's Authorization value (the api
// key's when no admin key is set; "": none).
func (a *EngineAuth) adminAuthorization() string {
	if k := a.load(); k != nil {
		return k.admin
	}
	return ""
}

// UseAuth makes b present a's credentials; call it before b serves.
func (b *Backend) UseAuth(a *EngineAuth) { b.auth = a }
