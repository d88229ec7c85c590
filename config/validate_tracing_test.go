package config

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestValidateTracing(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(t *Tracing)
		wantKey string
		wantMsg string
	}{
		{"endpoint without scheme", func(t *Tracing) { t.Endpoint = "collector:4318" }, "tracing.endpoint", "must start with http:// or https://"},
		{"endpoint grpc scheme", func(t *Tracing) { t.Endpoint = "grpc://collector:4317" }, "tracing.endpoint", "must start with http://"},
		{"endpoint unparsable", func(t *Tracing) { t.Endpoint = "http://[::1" }, "tracing.endpoint", "not a URL"},
		{"endpoint without host", func(t *Tracing) { t.Endpoint = "http://" }, "tracing.endpoint", "no host"},
		{"endpoint with query", func(t *Tracing) { t.Endpoint = "http://c:4318/?a=1" }, "tracing.endpoint", "query"},
		{"ratio above 1", func(t *Tracing) { t.SampleRatio = 1.5 }, "tracing.sample_ratio", "1.5 out of range 0..1"},
		{"ratio negative", func(t *Tracing) { t.SampleRatio = -0.01 }, "tracing.sample_ratio", "out of range 0..1"},
		{"ratio NaN", func(t *Tracing) { t.SampleRatio = math.NaN() }, "tracing.sample_ratio", "out of range"},
		{"service name empty", func(t *Tracing) { t.ServiceName = " " }, "tracing.service_name", "must not be empty"},
		{"header name with a space", func(t *Tracing) { t.Headers = map[string]string{"api key": "x"} }, "tracing.headers", `"api key" is not a header name`},
		{"header value with a line break", func(t *Tracing) { t.Headers = map[string]string{"x-key": "a\r\nb: c"} }, "tracing.headers.x-key", "line break"},
	}
	refusals := make([]refusal, len(tests))
	for i, tt := range tests {
		refusals[i] = refusal{tt.name, func(c *Config) { tt.mutate(&c.Tracing) }, tt.wantKey, tt.wantMsg}
	}
	checkRefusals(t, refusals)
}

func TestValidateTracingAccepts(t *testing.T) {
	for _, mutate := range []func(t *Tracing){
		func(t *Tracing) { t.Enabled, t.Endpoint = true, "http://collector:4318" },
		func(t *Tracing) { t.Endpoint = "https://otlp.example.com/otlp" },
		func(t *Tracing) { t.SampleRatio = 0 },
		func(t *Tracing) { t.Headers = map[string]string{"Authorization": "Bearer abc", "x-team": ""} },
	} {
		c := validConfig()
		mutate(&c.Tracing)
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// tracing.headers comes from a file as a mapping and from the environment
// or --set as OTEL_EXPORTER_OTLP_HEADERS writes it.
func TestLoadTracingHeaders(t *testing.T) {
	file := []byte(minimalYAML + "tracing:\n  headers:\n    x-key: from-file\n")
	tests := []struct {
		name string
		src  Source
		want map[string]string
	}{
		{"file", Source{Data: file}, map[string]string{"x-key": "from-file"}},
		{"default", Source{Data: []byte(minimalYAML)}, map[string]string{}},
		{"env", Source{Data: []byte(minimalYAML), Env: []string{"PDLB_TRACING_HEADERS=x-key=a, Authorization = Bearer t=1 ,"}},
			map[string]string{"x-key": "a", "Authorization": "Bearer t=1"}},
		{"override as text", Source{Data: []byte(minimalYAML), Overrides: map[string]any{"tracing.headers": "a=b"}}, map[string]string{"a": "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Tracing.Headers, tt.want) {
				t.Errorf("tracing.headers = %#v, want %#v", c.Tracing.Headers, tt.want)
			}
		})
	}
	_, err := Load(Source{Data: []byte(minimalYAML), Env: []string{"PDLB_TRACING_HEADERS=novalue"}})
	if err == nil || !strings.Contains(err.Error(), `tracing.headers: "novalue" is not name=value`) {
		t.Errorf("err = %v, want one naming tracing.headers", err)
	}
	_, err = Load(Source{Data: []byte(minimalYAML + "tracing:\n  headers:\n    x-n: 7\n")})
	if err == nil || !strings.Contains(err.Error(), "tracing.headers") {
		t.Errorf("err = %v, want one naming tracing.headers", err)
	}
}
