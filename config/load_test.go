package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const minimalYAML = `
prefill:
  - url: http://p:30000
decode:
  - url: http://d:30001
`

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pdlb.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each layer beats the one before: file < env < override.
func TestLoadPrecedence(t *testing.T) {
	path := writeFile(t, minimalYAML+"server:\n  port: 9000\n  host: 10.0.0.1\n")
	tests := []struct {
		name     string
		env      []string
		over     map[string]any
		wantPort int
	}{
		{"file", nil, nil, 9000},
		{"env over file", []string{"PDLB_SERVER_PORT=9100"}, nil, 9100},
		{"override over env", []string{"PDLB_SERVER_PORT=9100"}, map[string]any{"server.port": 9200}, 9200},
		{"override as text", nil, map[string]any{"server.port": "9300"}, 9300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(Source{File: path, Env: tt.env, Overrides: tt.over})
			if err != nil {
				t.Fatal(err)
			}
			if c.Server.Port != tt.wantPort {
				t.Errorf("port = %d, want %d", c.Server.Port, tt.wantPort)
			}
			if c.Server.Host != "10.0.0.1" {
				t.Errorf("host = %q: a later layer clobbered a key it did not set", c.Server.Host)
			}
			if c.Server.ReadTimeout != 60*time.Second {
				t.Errorf("read_timeout = %v, want the default 60s", c.Server.ReadTimeout)
			}
		})
	}
}

func TestLoadEnv(t *testing.T) {
	env := []string{
		"PDLB_LIMITS_MAX_BODY_BYTES=1024",
		"PDLB_BOOTSTRAP_ADVERTISE_HOST=10.1.2.3",
		"PDLB_SERVER_READ_TIMEOUT=5s",
		"PDLB_BREAKER_ENABLED=false",
		"PDLB_BREAKER_FAILURE_RATIO=0.25",
		"PDLB_BREAKER_CONSECUTIVE_FAILURES=7",
		"PDLB_SERVER_API_KEY=0123",
		"PDLB_CONFIG=/ignored.yaml",
		"HOME=/root",
	}
	c, err := Load(Source{Data: []byte(minimalYAML), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		key       string
		got, want any
	}{
		{"limits.max_body_bytes", c.Limits.MaxBodyBytes, 1024},
		{"bootstrap.advertise_host", c.Bootstrap.AdvertiseHost, "10.1.2.3"},
		{"server.read_timeout", c.Server.ReadTimeout, 5 * time.Second},
		{"breaker.enabled", c.Breaker.Enabled, false},
		{"breaker.failure_ratio", c.Breaker.FailureRatio, 0.25},
		{"breaker.consecutive_failures", c.Breaker.ConsecutiveFailures, uint32(7)},
		{"server.api_key", c.Server.APIKey, "0123"},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.key, ch.got, ch.want)
		}
	}
}

// A list of strings is one key: a YAML list in the file, comma-separated
// in the environment and in --set, each layer replacing the one below.
func TestLoadStringList(t *testing.T) {
	file := []byte(minimalYAML + "bootstrap:\n  allowed_sources: [10.0.0.0/16, 10.1.0.5]\n")
	tests := []struct {
		name string
		src  Source
		want []string
	}{
		{"default", Source{Data: []byte(minimalYAML)}, []string{}},
		{"file", Source{Data: file}, []string{"10.0.0.0/16", "10.1.0.5"}},
		{"env replaces file", Source{Data: file, Env: []string{"PDLB_BOOTSTRAP_ALLOWED_SOURCES= 10.2.0.0/16 ,fd00::/8,"}},
			[]string{"10.2.0.0/16", "fd00::/8"}},
		{"empty env empties", Source{Data: file, Env: []string{"PDLB_BOOTSTRAP_ALLOWED_SOURCES="}}, []string{}},
		{"override as text", Source{Data: file, Overrides: map[string]any{"bootstrap.allowed_sources": "10.3.0.1"}}, []string{"10.3.0.1"}},
		{"override as list", Source{Data: file, Overrides: map[string]any{"bootstrap.allowed_sources": []string{"::1"}}}, []string{"::1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Bootstrap.AllowedSources, tt.want) {
				t.Errorf("bootstrap.allowed_sources = %#v, want %#v", c.Bootstrap.AllowedSources, tt.want)
			}
		})
	}
}

func TestLoadBootstrapPort(t *testing.T) {
	c, err := Load(Source{Data: []byte(`
prefill:
  - url: http://p1:30000
    bootstrap_port: null
  - url: http://p2:30000
    bootstrap_port: 9001
  - url: http://p3:30000
decode:
  - url: http://d:30001
`)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefill[0].BootstrapPort != nil {
		t.Errorf("null bootstrap_port = %d, want nil", *c.Prefill[0].BootstrapPort)
	}
	if p := c.Prefill[1].BootstrapPort; p == nil || *p != 9001 {
		t.Errorf("bootstrap_port = %v, want 9001", p)
	}
	if c.Prefill[2].BootstrapPort != nil {
		t.Errorf("absent bootstrap_port is not nil")
	}
}

func TestLoadCLIListsReplaceFile(t *testing.T) {
	port := 7000
	c, err := Load(Source{
		Data:    []byte(minimalYAML),
		Prefill: []Prefill{{URL: "http://cli-p:1", BootstrapPort: &port}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Prefill) != 1 || c.Prefill[0].URL != "http://cli-p:1" {
		t.Errorf("prefill = %+v, want the CLI list", c.Prefill)
	}
	if len(c.Decode) != 1 || c.Decode[0].URL != "http://d:30001" {
		t.Errorf("decode = %+v, want the file's list (CLI gave none)", c.Decode)
	}
}

// Every Load error is an *Error naming the key (or the env var) at fault.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		src     Source
		wantKey string
		wantMsg string
	}{
		{"unknown top-level", Source{Data: []byte("bogus: 1\n")}, "bogus", "unknown key"},
		{"unknown nested", Source{Data: []byte("server:\n  prot: 1\n")}, "server.prot", "unknown key"},
		{"unknown in prefill item", Source{Data: []byte(
			"prefill:\n  - url: http://p:1\n  - url: http://p:2\n    bootstrap_prot: 1\n")},
			"prefill[1].bootstrap_prot", "unknown key"},
		{"unknown env", Source{Env: []string{"PDLB_SERVER_PROT=1"}}, "PDLB_SERVER_PROT", "unknown environment variable"},
		{"unknown override", Source{Overrides: map[string]any{"server.prot": 1}}, "server.prot", "unknown key"},
		{"list key as override", Source{Overrides: map[string]any{"prefill": "x"}}, "prefill", "unknown key"},
		{"port as string", Source{Data: []byte("server:\n  port: eighty\n")}, "server.port", "want an integer"},
		{"port as fraction", Source{Data: []byte("server:\n  port: 80.5\n")}, "server.port", "want an integer"},
		{"duration without unit", Source{Data: []byte("server:\n  read_timeout: 60\n")}, "server.read_timeout", "needs a unit"},
		{"bad duration", Source{Data: []byte("retry:\n  max: soon\n")}, "retry.max", "not a duration"},
		{"bool as int", Source{Data: []byte("metrics:\n  enabled: 1\n")}, "metrics.enabled", "want true or false"},
		{"negative uint", Source{Data: []byte("breaker:\n  min_requests: -1\n")}, "breaker.min_requests", "out of range"},
		{"uint32 overflow", Source{Data: []byte("breaker:\n  min_requests: 5000000000\n")}, "breaker.min_requests", "out of range"},
		{"bad bootstrap_port", Source{Data: []byte("prefill:\n  - url: http://p:1\n    bootstrap_port: abc\n")},
			"prefill[0].bootstrap_port", "want an integer"},
		{"section not a map", Source{Data: []byte("server: 8000\n")}, "server", ""},
		{"env bad int", Source{Env: []string{"PDLB_SERVER_PORT=abc"}}, "server.port", "PDLB_SERVER_PORT"},
		{"env bad duration", Source{Env: []string{"PDLB_RETRY_MAX=2"}}, "retry.max", "not a duration"},
		{"string list as scalar", Source{Data: []byte("bootstrap:\n  allowed_sources: 10.0.0.0/8\n")}, "bootstrap.allowed_sources", "must be an array"},
		{"string list item not a string", Source{Data: []byte("bootstrap:\n  allowed_sources: [10.0.0.0/8, 7]\n")}, "bootstrap.allowed_sources[1]", "want a string"},
		{"bad YAML", Source{Data: []byte("server: [\n")}, "", "parse YAML"},
		{"missing file", Source{File: filepath.Join(t.TempDir(), "nope.yaml")}, "", "nope.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.src)
			checkConfigError(t, err, tt.wantKey, tt.wantMsg)
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("err spans lines: %q", err)
			}
		})
	}
}
