package config

import (
	"errors"
	"testing"
)

func TestValidateDiscovery(t *testing.T) {
	on := func(c *Config) {
		c.Discovery.Kubernetes.Enabled = true
		c.Discovery.Kubernetes.PrefillSelector = "app=sglang,role=prefill"
		c.Discovery.Kubernetes.DecodeSelector = "app=sglang,role=decode"
	}
	k := func(c *Config) *Kubernetes { on(c); return &c.Discovery.Kubernetes }
	tests := []refusal{
		{"no selector", func(c *Config) { k(c).PrefillSelector, k(c).DecodeSelector = "", "" }, "discovery.kubernetes.prefill_selector", "needs prefill_selector, decode_selector or both"},
		{"bad prefill selector", func(c *Config) { k(c).PrefillSelector = "app=sglang,role in prefill" }, "discovery.kubernetes.prefill_selector", `"app=sglang,role in prefill" is not a label selector`},
		{"bad decode selector", func(c *Config) { k(c).DecodeSelector = "role in (decode" }, "discovery.kubernetes.decode_selector", "is not a label selector"},
		{"blank selector", func(c *Config) { k(c).DecodeSelector = "  " }, "discovery.kubernetes.decode_selector", "selects every pod"},
		{"same selector", func(c *Config) { k(c).DecodeSelector = "role=prefill, app=sglang" }, "discovery.kubernetes.decode_selector", "same pods as prefill_selector"},
		{"namespace", func(c *Config) { k(c).Namespace = "LLM_serving" }, "discovery.kubernetes.namespace", "not a namespace name"},
		{"no port", func(c *Config) { k(c).HTTPPortName, k(c).HTTPPortAnnotation = "", "" }, "discovery.kubernetes.http_port_name", "both empty"},
		{"port name", func(c *Config) { k(c).HTTPPortName = "http_port" }, "discovery.kubernetes.http_port_name", "not a container port name"},
		{"http annotation", func(c *Config) { k(c).HTTPPortAnnotation = "sglang.ai/http port" }, "discovery.kubernetes.http_port_annotation", "not an annotation key"},
		{"bootstrap annotation", func(c *Config) { k(c).BootstrapPortAnnotation = "/port" }, "discovery.kubernetes.bootstrap_port_annotation", "not an annotation key"},
		{"no prefill at all", func(c *Config) { k(c).PrefillSelector = ""; c.Prefill, c.Admin.Port = nil, 0 }, "prefill", "or discovery.kubernetes.prefill_selector"},
	}
	checkRefusals(t, tests)
}

// With discovery a role whose selector is set needs no static backend; the
// other role still does (without an admin API); all-namespaces and
// set-based selectors are fine.
func TestDiscoveryReplacesStaticBackends(t *testing.T) {
	c := validConfig()
	c.Prefill, c.Decode, c.Admin.Port = nil, nil, 0
	c.Discovery.Kubernetes = Default().Discovery.Kubernetes
	c.Discovery.Kubernetes.Enabled = true
	c.Discovery.Kubernetes.Namespace = "*"
	c.Discovery.Kubernetes.PrefillSelector = "app=sglang,role in (prefill)"
	c.Discovery.Kubernetes.DecodeSelector = "app=sglang,role=decode,!canary"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Discovery.Kubernetes.DecodeSelector = ""
	var ce *Error
	if err := c.Validate(); !errors.As(err, &ce) || ce.Key != "decode" {
		t.Fatalf("no decode anywhere: %v", err)
	}
	// Off, nothing of it is read: a broken selector does not stop pdlb.
	c = validConfig()
	c.Discovery.Kubernetes.PrefillSelector = "((("
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
