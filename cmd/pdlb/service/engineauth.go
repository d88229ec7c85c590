package service

import (
	"net"
	"strconv"

	"github.com/rs/zerolog"

	"pdlb/config"
)

// logEngineAuth says at every start and reload whether pdlb holds engine
// keys (never their values: a Secret mounted under a wrong name starts
// pdlb without them, and every request is then a 502), and warns where
// they would serve someone they should not:
//   - an admin API that anyone on the network may use adds a worker at an
//     address of their choosing, and every worker is sent the keys (the
//     admin key with pdlb's aborts);
//   - serving routes without server.api_key give any client of pdlb what
//     the engines keep to holders of their key.
func logEngineAuth(cfg *config.Config, log zerolog.Logger) {
	a := cfg.UpstreamAuth
	if a.APIKey == "" && a.AdminAPIKey == "" {
		return
	}
	log.Info().Bool("api_key", a.APIKey != "").Bool("admin_api_key", a.AdminAPIKey != "").Msg("upstream_auth: pdlb presents engine keys")
	if cfg.Admin.Port > 0 && cfg.Admin.APIKey == "" && !isLoopback(cfg.Admin.Host) {
		log.Warn().Str("admin", net.JoinHostPort(cfg.Admin.Host, strconv.Itoa(cfg.Admin.Port))).
			Msg("the admin API needs no key and listens beyond loopback, so anyone who reaches it can add a worker that pdlb then sends the engines' keys (upstream_auth): set admin.api_key or admin.host 127.0.0.1")
	}
	if a.APIKey != "" && cfg.Server.APIKey == "" {
		log.Warn().Msg("the engines require a key (upstream_auth.api_key) but pdlb's serving routes need none (server.api_key): any client that reaches pdlb uses the engines as a key holder, /flush_cache included")
	}
}

// isLoopback reports whether host (an admin.host) is reachable from this
// machine only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
