package service

import (
	"slices"
	"sync"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy"
)

// serviceTLS is every TLS setting a pdlb holds: its listeners' (nil when
// plain), the upstream one every backend dials https:// engines with, and
// the watch that reads their files again when they change.
type serviceTLS struct {
	server, admin *listenerTLS
	// upstream is made even when no backend is https://: the admin API
	// and reloads may add one, and it takes what is in force then.
	upstream *proxy.UpstreamTLS
	// upMu guards upFiles, the upstream_tls in force (the watch reads its
	// files again).
	upMu    sync.Mutex
	upFiles config.UpstreamTLS
	log     zerolog.Logger

	// watchMu guards watch and watching (between Start and Shutdown).
	watchMu  sync.Mutex
	watch    *certWatch
	watching bool
}

// newServiceTLS loads the TLS files cfg names; an error names the key.
func newServiceTLS(cfg *config.Config, log zerolog.Logger) (*serviceTLS, error) {
	t := &serviceTLS{log: log, upFiles: cfg.UpstreamTLS}
	var err error
	if t.upstream, err = proxy.NewUpstreamTLS(cfg.UpstreamTLS); err != nil {
		return nil, err
	}
	t.warnInsecure(cfg.UpstreamTLS)
	if t.server, err = newListenerTLS("server.tls", "serving", cfg.Server.TLS, log); err != nil {
		return nil, err
	}
	if cfg.Admin.Port != 0 {
		if t.admin, err = newListenerTLS("admin.tls", "admin", cfg.Admin.TLS, log); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// listeners are the listeners that speak TLS.
func (t *serviceTLS) listeners() []*listenerTLS {
	var out []*listenerTLS
	for _, l := range []*listenerTLS{t.server, t.admin} {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// files is what the watch watches.
func (t *serviceTLS) files() []string {
	var out []string
	for _, l := range t.listeners() {
		out = append(out, l.files()...)
	}
	t.upMu.Lock()
	u := t.upFiles
	t.upMu.Unlock()
	return append(out, u.CAFile, u.CertFile, u.KeyFile)
}

// warnInsecure says, at every start and every reload that keeps it on,
// that engines' certificates are not checked.
func (t *serviceTLS) warnInsecure(u config.UpstreamTLS) {
	if u.InsecureSkipVerify {
		t.log.Warn().Str("key", "upstream_tls.insecure_skip_verify").
			Msg("TLS to https:// backends does not verify their certificates: anyone on the path can read and change requests and answers; set upstream_tls.ca_file instead")
	}
}

// startWatch reads the files again whenever their directories change,
// from now until close. Without a watch (no inotify instance left)
// SIGHUP still reloads them.
func (t *serviceTLS) startWatch() {
	t.watchMu.Lock()
	defer t.watchMu.Unlock()
	t.watching = true
	t.followLocked()
}

// followLocked points the watch at the files in force, starting it when
// a reload names the first ones.
func (t *serviceTLS) followLocked() {
	if !t.watching {
		return
	}
	files := t.files()
	if t.watch != nil {
		t.watch.watch(files)
		return
	}
	if !slices.ContainsFunc(files, func(f string) bool { return f != "" }) {
		return
	}
	w, err := newCertWatch(t.reloadFiles, t.log)
	if err != nil {
		t.log.Warn().Err(err).Msg("TLS files: no watch; SIGHUP still reloads them")
		return
	}
	t.watch = w
	w.watch(files)
}

// reloadFiles is the watch's reload: every listener, and upstream_tls,
// reads its files again. Files that do not load keep what runs.
func (t *serviceTLS) reloadFiles() {
	for _, l := range t.listeners() {
		l.reloadFiles()
	}
	t.upMu.Lock()
	defer t.upMu.Unlock()
	if t.upFiles == (config.UpstreamTLS{}) {
		return
	}
	cfg, err := proxy.UpstreamTLSConfig(t.upFiles)
	if err != nil {
		t.log.Error().Err(err).Msg("upstream TLS files changed but do not load; new connections to https:// backends keep the running settings")
		return
	}
	t.upstream.Set(cfg)
	t.log.Info().Str("ca_file", t.upFiles.CAFile).Str("cert_file", t.upFiles.CertFile).Msg("upstream TLS files reloaded")
}

// prepare loads the TLS files a reloaded cfg names (the same files again
// on SIGHUP) without putting them in force; commit does, once the rest
// of the reload has succeeded. A listener whose TLS was turned on or off
// keeps its state: keepStartupOnly has put the running keys back into cfg.
func (t *serviceTLS) prepare(cfg *config.Config) (commit func(), err error) {
	type step struct {
		l  *listenerTLS
		st *tlsState
	}
	var steps []step
	for _, x := range []struct {
		l *listenerTLS
		c config.ListenerTLS
	}{{t.server, cfg.Server.TLS}, {t.admin, cfg.Admin.TLS}} {
		if x.l == nil || !x.c.Enabled() {
			continue
		}
		st, err := x.l.prepare(x.c)
		if err != nil {
			return nil, err
		}
		steps = append(steps, step{x.l, st})
	}
	up, err := proxy.UpstreamTLSConfig(cfg.UpstreamTLS)
	if err != nil {
		return nil, err
	}
	return func() {
		for _, s := range steps {
			s.l.commit(s.st)
		}
		t.upMu.Lock()
		t.upstream.Set(up)
		t.upFiles = cfg.UpstreamTLS
		t.upMu.Unlock()
		t.warnInsecure(cfg.UpstreamTLS)
		t.watchMu.Lock()
		t.followLocked()
		t.watchMu.Unlock()
	}, nil
}

// close ends the watch; none starts after it.
func (t *serviceTLS) close() {
	t.watchMu.Lock()
	t.watching = false
	w := t.watch
	t.watch = nil
	t.watchMu.Unlock()
	if w != nil {
		w.close() // outside watchMu: it waits for a reload under way
	}
}
