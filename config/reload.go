package config

import (
	"fmt"
	"sync"
	"time"

	"github.com/knadh/koanf/providers/file"
)

// DefaultDebounce is how long Loader.Watch waits after a file event before
// reloading: editors and os.WriteFile truncate and then write, and reloading
// between the two would report a spurious error.
const DefaultDebounce = 100 * time.Millisecond

// Loader remembers the Source a config came from so a reload applies the
// same env and flag layers on top of the changed file.
type Loader struct {
	Source Source
	// Debounce overrides DefaultDebounce when positive.
	Debounce time.Duration
}

// Load loads and validates the configuration, as `pdlb serve` needs it.
func (l *Loader) Load() (*Config, error) {
	cfg, err := Load(l.Source)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Watch calls onChange with a freshly loaded and validated config (or the
// error that prevented it) after each change to Source.File. Calls are
// serialized, and none happens after stop returns; onChange must not call
// stop. If the file is removed, onChange gets an error and watching ends
// (koanf's file provider stops there).
func (l *Loader) Watch(onChange func(*Config, error)) (stop func(), err error) {
	path := l.Source.File
	if path == "" {
		return nil, errorf("", "watch: no config file to watch")
	}
	debounce := l.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}

	var (
		mu      sync.Mutex
		stopped bool
		timer   *time.Timer
	)
	deliver := func(cfg *Config, err error) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			onChange(cfg, err)
		}
	}
	reload := func() { deliver(l.Load()) }

	fp := file.Provider(path)
	err = fp.Watch(func(_ any, werr error) {
		if werr != nil {
			deliver(nil, errorf("", fmt.Sprintf("watch %s: %v", path, werr)))
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if timer == nil {
			timer = time.AfterFunc(debounce, reload)
		} else {
			timer.Reset(debounce)
		}
	})
	if err != nil {
		return nil, errorf("", fmt.Sprintf("watch %s: %v", path, err))
	}
	return func() {
		mu.Lock()
		stopped = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		_ = fp.Unwatch()
	}, nil
}
