package proxy

import (
	"testing"

	"pdlb/config"
)

// Which key each engine route gets, as SGLang's auth levels want it.
func TestEngineAuthPerRoute(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      config.UpstreamAuth
		path     string
		want     string
		wantLine string
	}{
		{"none", config.UpstreamAuth{}, "/generate", "", ""},
		{"serving route", config.UpstreamAuth{APIKey: "k"}, "/generate", "Bearer k", "Authorization: Bearer k\r\n"},
		{"info route", config.UpstreamAuth{APIKey: "k", AdminAPIKey: "a"}, "/v1/loads", "Bearer k", "Authorization: Bearer k\r\n"},
		{"health open", config.UpstreamAuth{APIKey: "k", AdminAPIKey: "a"}, "/health", "", "Authorization: Bearer k\r\n"},
		{"health_generate open", config.UpstreamAuth{APIKey: "k"}, "/health_generate", "", "Authorization: Bearer k\r\n"},
		{"a client's flush is not lent the admin key", config.UpstreamAuth{APIKey: "k", AdminAPIKey: "a"}, "/flush_cache", "Bearer k", "Authorization: Bearer k\r\n"},
		{"admin key only", config.UpstreamAuth{AdminAPIKey: "a"}, "/generate", "", ""},
	} {
		a := NewEngineAuth(tc.cfg)
		if got := a.authorization(tc.path); got != tc.want {
			t.Errorf("%s: authorization(%s) = %q, want %q", tc.name, tc.path, got, tc.want)
		}
		if got := string(a.legHeader()); got != tc.wantLine {
			t.Errorf("%s: leg header %q, want %q", tc.name, got, tc.wantLine)
		}
	}
	// The admin key (aborts, the admin listener's flush), else the api key.
	for _, tc := range []struct {
		cfg  config.UpstreamAuth
		want string
	}{
		{config.UpstreamAuth{APIKey: "k", AdminAPIKey: "a"}, "Bearer a"},
		{config.UpstreamAuth{APIKey: "k"}, "Bearer k"},
		{config.UpstreamAuth{AdminAPIKey: "a"}, "Bearer a"},
		{config.UpstreamAuth{}, ""},
	} {
		if got := NewEngineAuth(tc.cfg).adminAuthorization(); got != tc.want {
			t.Errorf("%+v: admin authorization %q, want %q", tc.cfg, got, tc.want)
		}
	}
	var none *EngineAuth // a backend built without one
	if none.authorization("/generate") != "" || none.adminAuthorization() != "" || none.legHeader() != nil {
		t.Error("a nil EngineAuth sends credentials")
	}
	a := NewEngineAuth(config.UpstreamAuth{APIKey: "old"})
	a.Set(config.UpstreamAuth{APIKey: "new"})
	if got := a.authorization("/generate"); got != "Bearer new" {
		t.Errorf("after Set: %q", got)
	}
}

// An engine's 401 or 403 is pdlb's credentials' fault: a 502, retried on
// another pair, counted by the engine's breaker; other 4xx stay the
// client's.
func TestAuthRefusalIsPdlbsFault(t *testing.T) {
	b := mustBackend(t, "http://e:1", Decode)
	for _, tc := range []struct {
		status                      int
		client                      int
		retryable, counts, refusing bool
	}{
		{401, 502, true, true, true},
		{403, 403, false, false, false},
		{400, 400, false, false, false},
		{404, 404, false, false, false},
		{500, 502, false, true, false},
	} {
		e := &UpstreamError{Backend: b, Kind: KindStatus, Status: tc.status, Body: []byte(`{"error":"Unauthorized"}`)}
		if e.AuthRefused() != tc.refusing || e.ClientStatus() != tc.client || e.Retryable() != tc.retryable || e.CountsAsFailure() != tc.counts {
			t.Errorf("%d: refused %v, client %d, retryable %v, counts %v; want %v, %d, %v, %v", tc.status,
				e.AuthRefused(), e.ClientStatus(), e.Retryable(), e.CountsAsFailure(), tc.refusing, tc.client, tc.retryable, tc.counts)
		}
	}
}
