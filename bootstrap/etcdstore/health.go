package etcdstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Health says whether etcd answers, for pdlb_cluster_store_up and the
// logs: a linearizable read (it needs the cluster's leader, as writes do)
// of one small key every interval. Nothing else depends on it: replicas
// serve their copy either way, and each write finds out for itself.
type Health struct {
	cli      *clientv3.Client
	key      string
	every    time.Duration
	timeout  time.Duration
	log      zerolog.Logger
	up       atomic.Bool
	endpoint []string
}

// NewHealth probes cli every interval, each probe bounded by timeout.
func NewHealth(cli *clientv3.Client, prefix string, every, timeout time.Duration, log zerolog.Logger) *Health {
	return &Health{cli: cli, key: prefix + "replicas/", every: every, timeout: timeout, endpoint: cli.Endpoints(),
		log: log.With().Str("component", "etcdstore").Logger()}
}

// Up reports whether the last probe was answered.
func (h *Health) Up() bool { return h.up.Load() }

// Run probes until ctx ends; the first probe is at once.
func (h *Health) Run(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, h.timeout)
		_, err := h.cli.Get(pctx, h.key, clientv3.WithCountOnly())
		cancel()
		if ctx.Err() != nil {
			return
		}
		was := h.up.Swap(err == nil)
		switch {
		case err != nil && (was || first):
			h.log.Warn().Err(err).Strs("endpoints", h.endpoint).
				Msg("etcd unreachable: serving the registry and workers from the last copy; registrations and admin changes answer 503 until it is back")
		case err == nil && !was && !first:
			h.log.Info().Strs("endpoints", h.endpoint).Msg("etcd reachable again")
		}
		first = false
		sleep(ctx, h.every)
	}
}
