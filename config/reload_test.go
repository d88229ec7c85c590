package config

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// replaceFile writes atomically, as config management tools do, so the
// watcher sees one complete file.
func replaceFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type reloads struct {
	mu   sync.Mutex
	cfgs []*Config
	errs []error
}

func (r *reloads) record(c *Config, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
	} else {
		r.cfgs = append(r.cfgs, c)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatch(t *testing.T) {
	// stop must also end the watcher's goroutines.
	defer goleak.VerifyNone(t)
	path := filepath.Join(t.TempDir(), "pdlb.yaml")
	replaceFile(t, path, minimalYAML+"server:\n  port: 9000\n")

	var r reloads
	l := &Loader{
		Source:   Source{File: path, Env: []string{"PDLB_LOG_LEVEL=debug"}},
		Debounce: 20 * time.Millisecond,
	}
	stop, err := l.Watch(r.record)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	replaceFile(t, path, minimalYAML+"server:\n  port: 9001\n")
	waitFor(t, "reload with port 9001", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.cfgs) > 0 && r.cfgs[len(r.cfgs)-1].Server.Port == 9001
	})
	r.mu.Lock()
	if got := r.cfgs[len(r.cfgs)-1].Log.Level; got != "debug" {
		t.Errorf("log.level = %q after reload, want the env layer's debug", got)
	}
	r.mu.Unlock()

	// In-place writes (truncate, then write) must also end in a reload.
	if err := os.WriteFile(path, []byte(minimalYAML+"server:\n  port: 9002\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reload with port 9002", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.cfgs) > 0 && r.cfgs[len(r.cfgs)-1].Server.Port == 9002
	})

	replaceFile(t, path, minimalYAML+"server:\n  port: 70000\n")
	waitFor(t, "validation error", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.errs) > 0 && strings.Contains(r.errs[len(r.errs)-1].Error(), "server.port")
	})

	replaceFile(t, path, "bogus: 1\n")
	waitFor(t, "unknown key error", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.errs) > 0 && strings.Contains(r.errs[len(r.errs)-1].Error(), "bogus")
	})

	// After stop returns, no more calls.
	stop()
	r.mu.Lock()
	n := len(r.cfgs) + len(r.errs)
	r.mu.Unlock()
	replaceFile(t, path, minimalYAML)
	time.Sleep(100 * time.Millisecond) // give a wrongly live watcher time to fire
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := len(r.cfgs) + len(r.errs); m != n {
		t.Errorf("%d calls after stop", m-n)
	}
}

func TestWatchNeedsFile(t *testing.T) {
	if _, err := (&Loader{Source: Source{Data: []byte(minimalYAML)}}).Watch(func(*Config, error) {}); err == nil {
		t.Error("Watch without a file succeeded")
	}
}
