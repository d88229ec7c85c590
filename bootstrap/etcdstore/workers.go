package etcdstore

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Worker is one backend added through the admin API, as stored.
type Worker struct {
	Role          string `json:"role"`
	URL           string `json:"url"`
	BootstrapPort *int   `json:"bootstrap_port"`
}

// Workers keeps the admin API's workers in etcd, one key per backend,
// named by its normalised URL, so one backend is added once whichever
// replica is asked (create-if-absent in a transaction).
type Workers struct {
	cli    *clientv3.Client
	prefix string // <cluster prefix>workers/
	log    zerolog.Logger
}

// NewWorkers stores workers under prefix+"workers/".
func NewWorkers(cli *clientv3.Client, prefix string, log zerolog.Logger) *Workers {
	return &Workers{cli: cli, prefix: prefix + "workers/", log: log.With().Str("component", "etcdstore").Logger()}
}

// key is the worker's key; urlKey is its normalised URL (config.BackendURL.Key).
func (s *Workers) key(urlKey string) string { return s.prefix + url.PathEscape(urlKey) }

// Add stores w under urlKey unless a worker is stored there already
// (created false, and the stored one).
func (s *Workers) Add(ctx context.Context, urlKey string, w Worker) (created bool, existing *Worker, err error) {
	b, err := json.Marshal(w)
	if err != nil {
		return false, nil, err
	}
	k := s.key(urlKey)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(b))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return false, nil, err
	}
	if resp.Succeeded {
		return true, nil, nil
	}
	var old Worker
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		_ = json.Unmarshal(kvs[0].Value, &old)
	}
	return false, &old, nil
}

// Remove deletes the worker stored under urlKey and reports whether there
// was one.
func (s *Workers) Remove(ctx context.Context, urlKey string) (bool, error) {
	resp, err := s.cli.Delete(ctx, s.key(urlKey))
	if err != nil {
		return false, err
	}
	return resp.Deleted > 0, nil
}

// Mirror reports the stored workers until ctx ends: listed with all of
// them (after a start or a re-list), then put and deleted as they change
// (deleted gets the worker's URL).
func (s *Workers) Mirror(ctx context.Context, listed func([]Worker), put func(Worker), deleted func(url string)) {
	(&mirror{cli: s.cli, prefix: s.prefix, log: s.log, retry: time.Second,
		listed: func(kvs []*mvccpb.KeyValue, _ int64) {
			ws := make([]Worker, 0, len(kvs))
			for _, kv := range kvs {
				if w, ok := s.decode(kv); ok {
					ws = append(ws, w)
				}
			}
			listed(ws)
		},
		event: func(ev *clientv3.Event) {
			if ev.Type == clientv3.EventTypeDelete {
				if u, err := url.PathUnescape(strings.TrimPrefix(string(ev.Kv.Key), s.prefix)); err == nil {
					deleted(u)
				}
				return
			}
			if w, ok := s.decode(ev.Kv); ok {
				put(w)
			}
		},
	}).run(ctx)
}

func (s *Workers) decode(kv *mvccpb.KeyValue) (Worker, bool) {
	var w Worker
	if err := json.Unmarshal(kv.Value, &w); err != nil || w.URL == "" {
		s.log.Warn().Str("key", string(kv.Key)).Msg("etcd: ignoring a stored worker this pdlb cannot read")
		return Worker{}, false
	}
	return w, true
}
