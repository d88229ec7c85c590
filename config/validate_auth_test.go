package config

import "testing"

func TestValidateUpstreamAuth(t *testing.T) {
	checkRefusals(t, []refusal{
		{"api key with a line break", func(c *Config) { c.UpstreamAuth.APIKey = "k\r\nX-Admin: 1" }, "upstream_auth.api_key", "control character"},
		{"admin key with a tab", func(c *Config) { c.UpstreamAuth.AdminAPIKey = "a\tb" }, "upstream_auth.admin_api_key", "control character"},
		{"api key with a trailing newline", func(c *Config) { c.UpstreamAuth.APIKey = "secret\n" }, "upstream_auth.api_key", "white space"},
		{"admin key with a leading space", func(c *Config) { c.UpstreamAuth.AdminAPIKey = " secret" }, "upstream_auth.admin_api_key", "white space"},
		{"api key beyond ASCII", func(c *Config) { c.UpstreamAuth.APIKey = "clé" }, "upstream_auth.api_key", "beyond ASCII"},
	})
}

func TestValidateUpstreamAuthAccepts(t *testing.T) {
	for _, a := range []UpstreamAuth{
		{},
		{APIKey: "sk-0123456789abcdef"},
		{APIKey: "a key with inner spaces", AdminAPIKey: "admin/key+with=symbols"},
		{AdminAPIKey: "only-admin"},
	} {
		c := validConfig()
		c.UpstreamAuth = a
		if err := c.Validate(); err != nil {
			t.Errorf("%+v refused: %v", a, err)
		}
	}
}

// The keys come from the environment, so they stay out of config files.
func TestUpstreamAuthFromEnv(t *testing.T) {
	c, err := Load(Source{Env: []string{"PDLB_UPSTREAM_AUTH_API_KEY=0123", "PDLB_UPSTREAM_AUTH_ADMIN_API_KEY=adm"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.UpstreamAuth.APIKey != "0123" || c.UpstreamAuth.AdminAPIKey != "adm" {
		t.Fatalf("upstream_auth = %+v", c.UpstreamAuth)
	}
}
