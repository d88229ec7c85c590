package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
)

func readRepoConfig(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The shipped config.yaml runs the demo and is valid.
func TestRepoConfigLoads(t *testing.T) {
	l := Loader{Source: Source{Data: readRepoConfig(t)}}
	c, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Port != 8000 || c.Log.Format != "console" {
		t.Errorf("server.port = %d, log.format = %q; want the demo's 8000, console", c.Server.Port, c.Log.Format)
	}
	if len(c.Prefill) != 1 || c.Prefill[0].URL != "http://127.0.0.1:30000" ||
		c.Prefill[0].BootstrapPort == nil || *c.Prefill[0].BootstrapPort != 8998 {
		t.Errorf("prefill = %+v, want the demo prefill", c.Prefill)
	}
	if len(c.Decode) != 1 || c.Decode[0].URL != "http://127.0.0.1:30001" {
		t.Errorf("decode = %+v, want the demo decode", c.Decode)
	}
}

// config.yaml is the reference: every key appears, and apart from the demo's
// choices its values are the defaults, so the two cannot drift apart.
func TestRepoConfigIsReference(t *testing.T) {
	raw := readRepoConfig(t)
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(raw), yaml.Parser()); err != nil {
		t.Fatal(err)
	}
	for key := range leafKeys {
		if !k.Exists(key) {
			t.Errorf("config.yaml lacks %s", key)
		}
	}
	for _, item := range []string{"url:", "bootstrap_port:"} {
		if strings.Count(string(raw), item) < 2 {
			t.Errorf("config.yaml does not document list item key %s", item)
		}
	}

	c, err := Load(Source{Data: raw})
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Prefill, want.Decode = c.Prefill, c.Decode
	want.Log.Format = "console" // the demo is read by humans
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("config.yaml differs from Default() beyond the demo:\n got %+v\nwant %+v", *c, want)
	}
}
