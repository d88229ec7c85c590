package service

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
)

// certWatchDebounce is how long a certificate watch waits after the last
// change before reloading: cert-manager and kubelet write several files
// (certificate, key, CA; a new ..data directory and its symlink) in quick
// succession, and one reload after the last is what is wanted.
const certWatchDebounce = 200 * time.Millisecond

// certWatch calls reload when anything changes in the directories of the
// files it is given. It watches directories, not files: a Kubernetes
// secret volume swaps a ..data symlink and never writes the files named
// in the config, and a file replaced by rename is a new inode a file
// watch would lose.
type certWatch struct {
	w        *fsnotify.Watcher
	reload   func()
	log      zerolog.Logger
	debounce time.Duration

	// fireMu is held while reload runs, so close can wait for it.
	fireMu sync.Mutex
	mu     sync.Mutex
	dirs   map[string]bool
	timer  *time.Timer
	done   chan struct{}
	wg     sync.WaitGroup
}

func newCertWatch(reload func(), log zerolog.Logger) (*certWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	c := &certWatch{w: w, reload: reload, log: log, debounce: certWatchDebounce, dirs: map[string]bool{}, done: make(chan struct{})}
	c.wg.Go(c.loop)
	return c, nil
}

// watch makes the watched directories those of files ("" ignored).
func (c *certWatch) watch(files []string) {
	want := map[string]bool{}
	for _, f := range files {
		if f != "" {
			want[filepath.Dir(f)] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := range c.dirs {
		if !want[d] {
			c.w.Remove(d)
			delete(c.dirs, d)
		}
	}
	for d := range want {
		if c.dirs[d] {
			continue
		}
		if err := c.w.Add(d); err != nil {
			c.log.Warn().Err(err).Str("dir", d).Msg("TLS files: cannot watch their directory; SIGHUP still reloads them")
			continue
		}
		c.dirs[d] = true
	}
}

func (c *certWatch) loop() {
	for {
		select {
		case <-c.done:
			return
		case _, ok := <-c.w.Events:
			if !ok {
				return
			}
			c.mu.Lock()
			if c.timer == nil {
				c.timer = time.AfterFunc(c.debounce, c.fire)
			} else {
				c.timer.Reset(c.debounce)
			}
			c.mu.Unlock()
		case err, ok := <-c.w.Errors:
			if !ok {
				return
			}
			c.log.Warn().Err(err).Msg("TLS files: watch error")
		}
	}
}

// fire reloads unless the watch was closed meanwhile.
func (c *certWatch) fire() {
	c.fireMu.Lock()
	defer c.fireMu.Unlock()
	select {
	case <-c.done:
	default:
		c.reload()
	}
}

// close ends the watch; no reload starts after it returns.
func (c *certWatch) close() {
	c.mu.Lock()
	close(c.done)
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	c.w.Close()
	c.wg.Wait()
	// A reload under way ends first.
	c.fireMu.Lock()
	defer c.fireMu.Unlock()
}
