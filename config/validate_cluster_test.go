package config

import (
	"testing"
	"time"
)

func TestValidateCluster(t *testing.T) {
	cluster := func(c *Config) { c.Cluster.Etcd.Endpoints = []string{"http://127.0.0.1:2379"} }
	tests := []refusal{
		{"endpoint no port", func(c *Config) { c.Cluster.Etcd.Endpoints = []string{"etcd-0"} }, "cluster.etcd.endpoints[0]", "not host:port"},
		{"endpoint scheme", func(c *Config) { c.Cluster.Etcd.Endpoints = []string{"127.0.0.1:2379", "grpc://e:2379"} }, "cluster.etcd.endpoints[1]", "http or https"},
		{"endpoint path", func(c *Config) { c.Cluster.Etcd.Endpoints = []string{"http://e:2379/v3"} }, "cluster.etcd.endpoints[0]", "no path"},
		{"endpoint url without port", func(c *Config) { c.Cluster.Etcd.Endpoints = []string{"http://e"} }, "cluster.etcd.endpoints[0]", "host:port"},
		{"mixed tls", func(c *Config) { c.Cluster.Etcd.Endpoints = []string{"http://a:2379", "https://b:2379"} }, "cluster.etcd.endpoints", "mixes"},
		{"empty prefix", func(c *Config) { cluster(c); c.Cluster.Etcd.Prefix = "" }, "cluster.etcd.prefix", "must not be empty"},
		{"dial timeout", func(c *Config) { cluster(c); c.Cluster.Etcd.DialTimeout = 0 }, "cluster.etcd.dial_timeout", "positive"},
		{"request timeout", func(c *Config) { cluster(c); c.Cluster.Etcd.RequestTimeout = 0 }, "cluster.etcd.request_timeout", "positive"},
		{"lease ttl", func(c *Config) { cluster(c); c.Cluster.Etcd.LeaseTTL = time.Second }, "cluster.etcd.lease_ttl", "1s must be at least 2s"},
		{"password alone", func(c *Config) { cluster(c); c.Cluster.Etcd.Password = "x" }, "cluster.etcd.password", "without cluster.etcd.username"},
		{"cert without key", func(c *Config) { cluster(c); c.Cluster.Etcd.CertFile = "c.pem" }, "cluster.etcd.cert_file", "go together"},
		{"forget_after without health", func(c *Config) { c.Bootstrap.ForgetAfter = time.Minute; c.Health.Interval = 0 }, "bootstrap.forget_after", "health.interval"},
	}
	checkRefusals(t, tests)
}

// Without endpoints the cluster keys are not read, so nothing in them may
// stop a single instance from starting.
func TestClusterKeysIgnoredWithoutEndpoints(t *testing.T) {
	c := validConfig()
	c.Cluster.Etcd.Prefix, c.Cluster.Etcd.LeaseTTL, c.Cluster.Etcd.Password = "", 0, "x"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, eps := range [][]string{{"127.0.0.1:2379"}, {"http://127.0.0.2:2379", "http://[::1]:2379/"}, {"https://e-0:2379", "https://e-1:2379"}} {
		c := validConfig()
		c.Cluster.Etcd.Endpoints = eps
		if err := c.Validate(); err != nil {
			t.Errorf("%v: %v", eps, err)
		}
	}
}
