package service

import (
	"slices"

	"github.com/rs/zerolog"

	"pdlb/config"
)

// serviceTLS is every TLS setting a pdlb holds: its listeners' (nil when
// plain) and the watch that reads their files again when they change.
type serviceTLS struct {
	server, admin *listenerTLS
	log           zerolog.Logger
	watch         *certWatch
}

// newServiceTLS loads the TLS files cfg names; an error names the key.
func newServiceTLS(cfg *config.Config, log zerolog.Logger) (*serviceTLS, error) {
	t := &serviceTLS{log: log}
	var err error
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
	return out
}

// startWatch reads the files again whenever their directories change.
// Without a watch (no inotify instance left) SIGHUP still reloads them.
func (t *serviceTLS) startWatch() {
	files := t.files()
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

// reloadFiles is the watch's reload: every listener reads its files again.
func (t *serviceTLS) reloadFiles() {
	for _, l := range t.listeners() {
		l.reloadFiles()
	}
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
	return func() {
		for _, s := range steps {
			s.l.commit(s.st)
		}
		if t.watch != nil {
			t.watch.watch(t.files())
		}
	}, nil
}

// close ends the watch.
func (t *serviceTLS) close() {
	if t.watch != nil {
		t.watch.close()
	}
}
