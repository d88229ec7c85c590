package service

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/sony/gobreaker/v2"

	"pdlb/bench/mock"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// startMock serves a mock engine on loopback until the test ends.
func startMock(t *testing.T, o mock.Options) (*mock.Engine, string) {
	t.Helper()
	o.TokenDelay = -1
	e := mock.New(o, testLog(t))
	ln := listen(t)
	go e.Serve(ln)
	t.Cleanup(func() { e.Shutdown() })
	return e, "http://" + ln.Addr().String()
}

// authed sends body to url with "Authorization: Bearer key".
func authed(t *testing.T, method, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	return proxytest.ReadAll(t, resp, err)
}

// Engines started with SGLang's --api-key and --admin-api-key serve
// through pdlb once upstream_auth carries their keys: the legs and info
// calls present the api key, pdlb's own aborts the admin key; a client's
// /flush_cache is not lent the admin key, so engines that keep it to admin
// key holders refuse it. The
// client's own Authorization never reaches an engine, even when it holds
// the very key the engines want; an engine's 401 is pdlb's fault, a 502
// that says so, never the client's 401.
func TestEngineAPIKeys(t *testing.T) {
	const key, adminKey = "shared-key", "engine-admin"
	keyed := func(o mock.Options) (*mock.Engine, string) {
		o.APIKey, o.AdminAPIKey = key, adminKey
		return startMock(t, o)
	}
	p0, p0URL := keyed(mock.Options{Role: mock.RolePrefill})
	d0, d0URL := keyed(mock.Options{Role: mock.RoleDecode})

	cfg := testConfig()
	cfg.Server.APIKey = key // the client presents the engines' key to pdlb
	cfg.Bootstrap.Mode = "off"
	cfg.Prefill = []config.Prefill{{URL: p0URL}}
	cfg.Decode = []config.Decode{{URL: d0URL}}
	cfg.Breaker.Enabled = false
	cfg.Abort = config.Default().Abort
	cfg.Admin = config.Admin{Host: "127.0.0.1", Port: proxytest.FreePort(t), APIKey: "operator-key"}
	svc := startService(t, &cfg, testLog(t))
	url, admin := "http://"+svc.Addr(), "http://127.0.0.1:"+strconv.Itoa(cfg.Admin.Port)

	resp, body := authed(t, "POST", url+"/generate", key, `{"text":"hi"}`)
	if resp.StatusCode != 502 || !strings.Contains(body, "refused pdlb's credentials") || !strings.Contains(body, "upstream_auth.api_key") {
		t.Fatalf("without upstream_auth: %d %s, want a 502 naming upstream_auth", resp.StatusCode, body)
	}
	if p0.Unauthorized()+d0.Unauthorized() == 0 {
		t.Fatal("the engines refused nothing: did pdlb pass the client's Authorization on?")
	}

	// The keys, put in force by a reload, with engines that never saw pdlb
	// without them: every request they refuse is a failure of pdlb's.
	p, pURL := keyed(mock.Options{Role: mock.RolePrefill})
	// This prefill answers every generation 503 (retried on the other), so
	// the decode's leg of those requests is aborted: with the admin key, or
	// the decode refuses the abort.
	failing, failingURL := keyed(mock.Options{Role: mock.RolePrefill, ErrorRate: 1, ErrorStatus: 503})
	d, dURL := keyed(mock.Options{Role: mock.RoleDecode, OutputLen: 4, DecodePerToken: 25 * time.Millisecond}) // still working when the failing prefill answers
	next := *svc.Config()
	next.UpstreamAuth = config.UpstreamAuth{APIKey: key, AdminAPIKey: adminKey}
	next.Prefill = []config.Prefill{{URL: pURL}, {URL: failingURL}}
	next.Decode = []config.Decode{{URL: dURL}}
	next.Retry = config.Retry{MaxAttempts: 4, Initial: time.Millisecond, Max: time.Millisecond}
	if err := svc.Apply(&next); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8 || failing.Stats().Injected == 0; i++ {
		if i == 200 {
			t.Fatal("the failing prefill was never picked")
		}
		for _, b := range []string{`{"text":"hi"}`, `{"text":"hi","stream":true}`} {
			if resp, body := authed(t, "POST", url+"/generate", key, b); resp.StatusCode != 200 {
				t.Fatalf("with upstream_auth: %d %s", resp.StatusCode, body)
			}
		}
	}
	if resp, body := authed(t, "GET", url+"/v1/models", key, ""); resp.StatusCode != 200 || !strings.Contains(body, "mock-model") {
		t.Fatalf("/v1/models: %d %s", resp.StatusCode, body)
	}
	// /server_info relays the engines' server_args, whose keys pdlb nulls:
	// it asked with the engines' key, its client need not hold it.
	if resp, body := authed(t, "GET", url+"/server_info", key, ""); resp.StatusCode != 200 ||
		strings.Contains(body, adminKey) || !strings.Contains(body, `"api_key":null`) || strings.Count(body, `"admin_api_key":null`) != 3 {
		t.Fatalf("/server_info: %d %s", resp.StatusCode, body)
	}
	if resp, body := authed(t, "POST", url+"/flush_cache", key, ``); resp.StatusCode != 502 || strings.Count(body, `"status":401`) != 3 {
		t.Fatalf("/flush_cache (the admin key's, which pdlb does not lend): %d %s, want each engine's 401", resp.StatusCode, body)
	}
	flushes := p.Unauthorized() + failing.Unauthorized() + d.Unauthorized()
	// The operator's flush, on the admin listener behind admin.api_key, goes
	// with the engines' admin key.
	if resp, body := authed(t, "POST", admin+"/flush_cache", "wrong", ``); resp.StatusCode != 401 {
		t.Fatalf("admin /flush_cache without admin.api_key: %d %s", resp.StatusCode, body)
	}
	if resp, body := authed(t, "POST", admin+"/flush_cache", "operator-key", ``); resp.StatusCode != 200 || strings.Count(body, `"ok":true`) != 3 {
		t.Fatalf("admin /flush_cache: %d %s, want every engine's 200", resp.StatusCode, body)
	}
	if resp, _ := authed(t, "GET", admin+"/flush_cache", "operator-key", ``); resp.StatusCode != 405 {
		t.Fatalf("GET admin /flush_cache: %d, want 405", resp.StatusCode)
	}
	// The decode leg of a request whose prefill failed is aborted with the
	// admin key (the mock records only the aborts it accepted).
	if !proxytest.WaitFor(5*time.Second, func() bool { return len(d.Stats().Aborted) > 0 }) {
		t.Fatalf("no abort accepted by the decode (refused: %d)", d.Unauthorized())
	}
	if n := p.Unauthorized() + failing.Unauthorized() + d.Unauthorized(); n != flushes || n != 3 {
		t.Errorf("the engines refused %d requests with upstream_auth set, want the 3 flushes alone", n)
	}
}

// An engine restarted with another key is routed around: its refusals
// count against its breaker and the request is retried on another pair,
// so the client sees no failure, while /health (open on every engine)
// says all is well.
func TestEngineWithAnotherKeyIsRoutedAround(t *testing.T) {
	_, pURL := startMock(t, mock.Options{Role: mock.RolePrefill, APIKey: "k"})
	_, goodURL := startMock(t, mock.Options{Role: mock.RoleDecode, APIKey: "k"})
	stale, staleURL := startMock(t, mock.Options{Role: mock.RoleDecode, APIKey: "old-key"})

	cfg := testConfig()
	cfg.Bootstrap.Mode = "off"
	cfg.UpstreamAuth.APIKey = "k"
	cfg.Prefill = []config.Prefill{{URL: pURL}}
	cfg.Decode = []config.Decode{{URL: goodURL}, {URL: staleURL}}
	cfg.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: 2, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1, Window: time.Minute}
	cfg.Retry = config.Retry{MaxAttempts: 3, Initial: time.Millisecond, Max: time.Millisecond}
	svc := startService(t, &cfg, testLog(t))
	url := "http://" + svc.Addr()

	for i := 0; i < 30; i++ {
		if resp, body := proxytest.Post(t, url+"/generate", `{"text":"hi"}`); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if stale.Unauthorized() == 0 {
		t.Fatal("the stale decode was never tried")
	}
	if st := svc.Pool.Find(staleURL).Breaker().State(); st != gobreaker.StateOpen {
		t.Errorf("the stale decode's breaker is %v, want open", st)
	}
}

// pdlb says whether it holds engine keys (never their values) and warns
// where they would serve someone they should not.
func TestEngineAuthWarnings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*config.Config)
		want   []string
		absent []string
	}{
		{"no keys: nothing said", func(c *config.Config) {}, nil, []string{"upstream_auth", "admin API needs no key"}},
		{"keys, an open admin API on the network, no server key", func(c *config.Config) {
			c.UpstreamAuth = config.UpstreamAuth{APIKey: "secret-1", AdminAPIKey: "secret-2"}
			c.Admin = config.Admin{Host: "0.0.0.0", Port: 8001}
		}, []string{`"api_key":true`, `"admin_api_key":true`, "admin API needs no key", "serving routes need none"}, []string{"secret-1", "secret-2"}},
		{"keys behind an admin key and a server key", func(c *config.Config) {
			c.UpstreamAuth = config.UpstreamAuth{APIKey: "secret-1"}
			c.Admin = config.Admin{Host: "0.0.0.0", Port: 8001, APIKey: "adm"}
			c.Server.APIKey = "cli"
		}, []string{`"api_key":true`, `"admin_api_key":false`}, []string{"admin API needs no key", "serving routes need none", "secret-1"}},
		{"admin API on loopback", func(c *config.Config) {
			c.UpstreamAuth = config.UpstreamAuth{AdminAPIKey: "secret-2"}
			c.Admin = config.Admin{Host: "127.0.0.1", Port: 8001}
		}, []string{`"admin_api_key":true`}, []string{"admin API needs no key", "serving routes need none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			tc.change(&cfg)
			logs := &proxytest.SyncBuffer{}
			logEngineAuth(&cfg, zerolog.New(logs))
			out := string(logs.Bytes())
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(out, a) {
					t.Errorf("log holds %q:\n%s", a, out)
				}
			}
		})
	}
}
