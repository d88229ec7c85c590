package config

import "testing"

// Load and Validate must turn any bytes into a config or an error, never a panic.
func FuzzLoadYAML(f *testing.F) {
	f.Add([]byte(minimalYAML))
	f.Add([]byte("server:\n  port: 9000\n  read_timeout: 5s\n"))
	f.Add([]byte("prefill:\n  - url: http://p:1\n    bootstrap_port: null\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Load(Source{Data: data})
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Load error %v is %T, want *config.Error", err, err)
			}
			return
		}
		_ = c.Validate()
	})
}
