package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseServeArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want ServeArgs
	}{
		{"empty", nil, ServeArgs{Overrides: map[string]any{}}},
		{"prefill with port", []string{"--prefill", "http://p:30000", "8998"},
			ServeArgs{Prefill: []Prefill{{URL: "http://p:30000", BootstrapPort: intp(8998)}}, Overrides: map[string]any{}}},
		{"prefill with none", []string{"--prefill", "http://p:30000", "none"},
			ServeArgs{Prefill: []Prefill{{URL: "http://p:30000"}}, Overrides: map[string]any{}}},
		{"prefill without port then flag", []string{"--prefill", "http://p:30000", "--decode", "http://d:30001"},
			ServeArgs{Prefill: []Prefill{{URL: "http://p:30000"}}, Decode: []Decode{{URL: "http://d:30001"}}, Overrides: map[string]any{}}},
		{"prefill at end", []string{"--prefill", "http://p:30000"},
			ServeArgs{Prefill: []Prefill{{URL: "http://p:30000"}}, Overrides: map[string]any{}}},
		{"prefill= form with port", []string{"--prefill=http://p:30000", "9000"},
			ServeArgs{Prefill: []Prefill{{URL: "http://p:30000", BootstrapPort: intp(9000)}}, Overrides: map[string]any{}}},
		{"repeated", []string{
			"--prefill", "http://p1:30000", "8998", "--prefill", "http://p2:30000", "none",
			"--prefill", "http://p3:30000", "--decode", "http://d1:30001", "--decode=http://d2:30001"},
			ServeArgs{
				Prefill: []Prefill{
					{URL: "http://p1:30000", BootstrapPort: intp(8998)},
					{URL: "http://p2:30000"},
					{URL: "http://p3:30000"},
				},
				Decode:    []Decode{{URL: "http://d1:30001"}, {URL: "http://d2:30001"}},
				Overrides: map[string]any{},
			}},
		{"port= form", []string{"--port=9000"}, ServeArgs{Overrides: map[string]any{"server.port": 9000}}},
		{"last port wins", []string{"--port", "1", "--port", "2"}, ServeArgs{Overrides: map[string]any{"server.port": 2}}},
		{"shorthands", []string{"--host", "::", "--log-level", "debug", "--log-format=console",
			"--bootstrap-mode", "external", "--advertise-host", "10.0.0.9"},
			ServeArgs{Overrides: map[string]any{
				"server.host": "::", "log.level": "debug", "log.format": "console",
				"bootstrap.mode": "external", "bootstrap.advertise_host": "10.0.0.9",
			}}},
		{"config and pprof", []string{"-c", "a.yaml", "--pprof", "127.0.0.1:6060"},
			ServeArgs{ConfigFile: "a.yaml", PprofAddr: "127.0.0.1:6060", Overrides: map[string]any{}}},
		{"--config=", []string{"--config=b.yaml"}, ServeArgs{ConfigFile: "b.yaml", Overrides: map[string]any{}}},
		{"set", []string{"--set", "limits.max_body_bytes=1024", "--set=server.api_key=a=b"},
			ServeArgs{Overrides: map[string]any{"limits.max_body_bytes": "1024", "server.api_key": "a=b"}}},
		{"set a string list", []string{"--set", "bootstrap.allowed_sources=10.0.0.0/16,10.1.0.5"},
			ServeArgs{Overrides: map[string]any{"bootstrap.allowed_sources": "10.0.0.0/16,10.1.0.5"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServeArgs(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseServeArgsErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantKey string
		wantMsg string
	}{
		{"port missing value", []string{"--port"}, "--port", "missing value"},
		{"port followed by flag", []string{"--port", "--host", "h"}, "--port", "missing value"},
		{"prefill missing url", []string{"--prefill"}, "--prefill", "missing value"},
		{"decode missing url", []string{"--decode", "--port", "1"}, "--decode", "missing value"},
		{"config missing", []string{"-c"}, "-c", "missing value"},
		{"port not a number", []string{"--port", "http"}, "--port", "not a port number"},
		{"unknown flag", []string{"--bogus", "1"}, "--bogus", "unknown flag"},
		{"stray argument", []string{"--decode", "http://d:1", "http://d:2"}, "http://d:2", "unexpected argument"},
		{"set without =", []string{"--set", "server.port"}, "--set", "want key=value"},
		{"set unknown key", []string{"--set", "server.prot=1"}, "--set", "unknown key server.prot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseServeArgs(tt.args)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *config.Error", err)
			}
			if ce.Key != tt.wantKey || !strings.Contains(ce.Problem, tt.wantMsg) {
				t.Errorf("err = %q, want key %q and %q", err, tt.wantKey, tt.wantMsg)
			}
		})
	}
	if _, err := ParseServeArgs([]string{"--port", "1", "-h"}); !errors.Is(err, ErrHelp) {
		t.Errorf("-h: err = %v, want ErrHelp", err)
	}
}

// The parsed arguments feed Load: flags win over the file and CLI lists
// replace the file's.
func TestServeArgsSource(t *testing.T) {
	a, err := ParseServeArgs([]string{"--prefill", "http://cli:1", "none", "--port", "9200", "--set", "server.api_key=0123"})
	if err != nil {
		t.Fatal(err)
	}
	src := a.Source()
	src.Data = []byte(minimalYAML + "server:\n  port: 9000\n")
	src.Env = []string{"PDLB_SERVER_PORT=9100"}
	c, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Port != 9200 || c.Server.APIKey != "0123" {
		t.Errorf("port %d api_key %q, want 9200 and \"0123\"", c.Server.Port, c.Server.APIKey)
	}
	if len(c.Prefill) != 1 || c.Prefill[0].URL != "http://cli:1" || c.Prefill[0].BootstrapPort != nil {
		t.Errorf("prefill = %+v, want the CLI's with a nil port", c.Prefill)
	}
}
