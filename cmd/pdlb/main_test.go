package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pdlb/proxy/proxytest"
)

// TestMain fails the package when a test leaves a goroutine behind (a
// subcommand that does not stop cleanly).
func TestMain(m *testing.M) { proxytest.RunWithLeakCheck(m) }

// exitCode is what main would exit with for err.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "prefill:\n  - url: http://p:30000\n    bootstrap_port: 8998\ndecode:\n  - url: http://d:30001\n")
	if err := run([]string{"check-config", good}); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	cases := []struct{ name, body, key string }{
		{"unknown key", "prefill:\n  - url: http://p:1\ndecode:\n  - url: http://d:2\nserver:\n  prot: 1\n", "server.prot"},
		{"no decode and no way to add one", "prefill:\n  - url: http://p:1\nadmin:\n  port: 0\n", "decode"},
		{"bad url", "prefill:\n  - url: p:1\ndecode:\n  - url: http://d:2\n", "prefill[0].url"},
		{"duplicate", "prefill:\n  - url: http://p:1\ndecode:\n  - url: http://p:1\n", "url"},
		{"port range", "prefill:\n  - url: http://p:1\ndecode:\n  - url: http://d:2\nserver:\n  port: 70000\n", "server.port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := run([]string{"check-config", write(strings.ReplaceAll(c.name, " ", "_")+".yaml", c.body)})
			if exitCode(err) != 2 || !strings.Contains(err.Error(), c.key) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("exit %d, error %v; want exit 2 and one line naming %s", exitCode(err), err, c.key)
			}
		})
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"serve", "--prefill"}, {"mock", "--role", "x", "--port", "1"}, {"bench", "--input-len", "x"}} {
		if err := run(args); exitCode(err) != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, exitCode(err), err)
		}
	}
}
