package mock

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The mock guards its routes as SGLang does with --api-key and
// --admin-api-key: health open, admin routes the admin key's, the rest the
// api key's.
func TestEngineAPIKeys(t *testing.T) {
	call := func(url, method, path, auth string) int {
		t.Helper()
		body := ""
		if method == http.MethodPost {
			body = `{"text":"hi","rid":"r","bootstrap_host":"127.0.0.1","bootstrap_port":8998,"bootstrap_room":1}`
		}
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client(t, 5*time.Second).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	type check struct {
		method, path, auth string
		want               int
	}
	for _, tc := range []struct {
		name        string
		api, admin  string
		checks      []check
		refusedWant int64
	}{
		{"no keys: open", "", "", []check{
			{"POST", "/generate", "", 200}, {"POST", "/abort_request", "", 200},
		}, 0},
		{"api key only", "k1", "", []check{
			{"GET", "/health", "", 200},
			{"GET", "/health_generate", "", 200},
			{"POST", "/generate", "", 401},
			{"POST", "/generate", "Bearer wrong", 401},
			{"POST", "/generate", "Bearer k1", 200},
			{"POST", "/generate", "bearer k1", 200},
			{"GET", "/v1/loads", "Bearer k1", 200},
			{"POST", "/abort_request", "Bearer k1", 200}, // admin routes take the api key when no admin key is set
			{"POST", "/abort_request", "", 401},
		}, 3},
		{"both keys", "k1", "adm", []check{
			{"POST", "/generate", "Bearer k1", 200},
			{"POST", "/generate", "Bearer adm", 401}, // the api key guards serving routes, whatever else is set
			{"POST", "/abort_request", "Bearer k1", 401},
			{"POST", "/abort_request", "Bearer adm", 200},
			{"POST", "/flush_cache", "Bearer adm", 200},
		}, 2},
		{"admin key only", "", "adm", []check{
			{"POST", "/generate", "", 200},
			{"POST", "/flush_cache", "", 401},
			{"POST", "/flush_cache", "Bearer adm", 200},
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, url := startEngine(t, Options{Role: RoleDecode, TokenDelay: -1, OutputLen: 1, APIKey: tc.api, AdminAPIKey: tc.admin})
			for _, c := range tc.checks {
				if got := call(url, c.method, c.path, c.auth); got != c.want {
					t.Errorf("%s %s with %q: %d, want %d", c.method, c.path, c.auth, got, c.want)
				}
			}
			if got := e.Unauthorized(); got != tc.refusedWant {
				t.Errorf("Unauthorized() = %d, want %d", got, tc.refusedWant)
			}
		})
	}
}
