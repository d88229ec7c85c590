package etcdstore

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// mirror keeps a local copy of every key under a prefix: a full list, then
// a watch from the revision after it. When the watch cannot go on (the
// revision it needs was compacted away, the member lost its leader, the
// stream broke) it lists again: the list replaces the copy whole, so
// nothing missed in between survives. While etcd is down the copy is
// simply kept as it is.
type mirror struct {
	cli    *clientv3.Client
	prefix string
	log    zerolog.Logger
	// listed is given the whole prefix as of rev; event one change after it.
	listed func(kvs []*mvccpb.KeyValue, rev int64)
	event  func(ev *clientv3.Event)
	// retry is the pause between failed lists.
	retry time.Duration
}

// run mirrors until ctx ends.
func (m *mirror) run(ctx context.Context) {
	failing := false
	for ctx.Err() == nil {
		rev, err := m.list(ctx)
		if err != nil {
			if !failing && ctx.Err() == nil {
				m.log.Warn().Err(err).Str("prefix", m.prefix).Msg("etcd: cannot list shared state; serving the last copy until etcd answers")
			}
			failing = true
			sleep(ctx, m.retry)
			continue
		}
		if failing {
			m.log.Info().Str("prefix", m.prefix).Int64("revision", rev).Msg("etcd: shared state listed again; local copy caught up")
		}
		failing = false
		m.watch(ctx, rev)
	}
}

func (m *mirror) list(ctx context.Context) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, m.retry*5)
	defer cancel()
	resp, err := m.cli.Get(lctx, m.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	m.listed(resp.Kvs, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// watch applies changes after rev until the watch ends; the caller lists
// again then.
func (m *mirror) watch(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range m.cli.Watch(wctx, m.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			if ctx.Err() == nil {
				m.log.Warn().Err(err).Str("prefix", m.prefix).Int64("from_revision", rev+1).Msg("etcd: watch ended; listing the shared state again")
			}
			return
		}
		for _, ev := range resp.Events {
			m.event(ev)
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
