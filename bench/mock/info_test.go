package mock

import (
	"testing"
)

func TestHealthRoutes(t *testing.T) {
	_, url := startEngine(t, Options{})
	for _, p := range []string{"/health", "/health_generate"} {
		status, b, _ := do(t, "GET", url+p, "")
		if status != 200 || len(b) != 0 {
			t.Errorf("GET %s: %d %q", p, status, b)
		}
	}
	if status, _, _ := do(t, "POST", url+"/health", ""); status != 405 {
		t.Errorf("POST /health: %d, want 405", status)
	}
}

func TestServerInfo(t *testing.T) {
	_, url := startEngine(t, Options{Role: RolePrefill, Model: "m"})
	for _, p := range []string{"/server_info", "/get_server_info"} {
		status, b, _ := do(t, "GET", url+p, "")
		v := decode(t, b)
		if status != 200 || path(v, "disaggregation_mode") != "prefill" || path(v, "model_path") != "m" {
			t.Errorf("%s: %d %s", p, status, b)
		}
		if _, ok := path(v, "internal_states", 0, "last_gen_throughput").(float64); !ok {
			t.Errorf("%s: no internal_states[0].last_gen_throughput: %s", p, b)
		}
	}
}

func TestModelInfoAndModels(t *testing.T) {
	_, url := startEngine(t, Options{Model: "m"})
	for _, p := range []string{"/model_info", "/get_model_info"} {
		_, b, _ := do(t, "GET", url+p, "")
		v := decode(t, b)
		if path(v, "model_path") != "m" || path(v, "is_generation") != true {
			t.Errorf("%s: %s", p, b)
		}
	}
	_, b, _ := do(t, "GET", url+"/v1/models", "")
	v := decode(t, b)
	if path(v, "object") != "list" || path(v, "data", 0, "id") != "m" || path(v, "data", 0, "object") != "model" {
		t.Errorf("/v1/models: %s", b)
	}
}

func TestFlushCacheAndAbort(t *testing.T) {
	e, url := startEngine(t, Options{})
	if status, _ := post(t, url+"/flush_cache", ""); status != 200 {
		t.Errorf("flush_cache %d", status)
	}
	if status, _ := post(t, url+"/abort_request", `{"rid":"gone"}`); status != 200 {
		t.Errorf("abort_request %d", status)
	}
	if got := e.Stats().Aborted; len(got) != 1 || got[0] != "gone" {
		t.Errorf("Aborted %v", got)
	}
}
