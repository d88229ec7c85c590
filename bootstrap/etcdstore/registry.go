package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"pdlb/bootstrap"
)

// Registry keeps the embedded registry's namespaces in etcd, one key per
// bootstrap port holding the whole namespace (topology and ranks): a
// registration is a read-modify-write of that one key in an STM
// transaction, so two replicas taking registrations of one prefill at once
// cannot both fix its topology, and a reader sees all of a namespace's
// change or none of it. A namespace is a few hundred bytes per rank.
type Registry struct {
	cli    *clientv3.Client
	prefix string // <cluster prefix>registry/
	reg    *bootstrap.Registry
	log    zerolog.Logger
}

var _ bootstrap.Store = (*Registry)(nil)

// NewRegistry stores reg's namespaces under prefix+"registry/"; call
// reg.SetStore with it and run Mirror.
func NewRegistry(cli *clientv3.Client, prefix string, reg *bootstrap.Registry, log zerolog.Logger) *Registry {
	return &Registry{cli: cli, prefix: prefix + "registry/", reg: reg, log: log.With().Str("component", "etcdstore").Logger()}
}

func (s *Registry) key(port int) string { return s.prefix + strconv.Itoa(port) }

// Update implements bootstrap.Store.
func (s *Registry) Update(ctx context.Context, port int, change func(*bootstrap.NamespaceState) error) (*bootstrap.NamespaceState, int64, error) {
	key := s.key(port)
	var out *bootstrap.NamespaceState
	resp, err := concurrency.NewSTM(s.cli, func(stm concurrency.STM) error {
		st := &bootstrap.NamespaceState{}
		if v := stm.Get(key); v != "" {
			if err := json.Unmarshal([]byte(v), st); err != nil {
				return fmt.Errorf("etcd key %s: %w", key, err)
			}
		}
		if err := change(st); err != nil {
			return err
		}
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		stm.Put(key, string(b))
		out = st
		return nil
	}, concurrency.WithAbortContext(ctx))
	if err != nil {
		return nil, 0, err
	}
	return out, resp.Header.Revision, nil
}

// Delete implements bootstrap.Store.
func (s *Registry) Delete(ctx context.Context, port int) (int64, error) {
	resp, err := s.cli.Delete(ctx, s.key(port))
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// Mirror keeps the registry's local copy current until ctx ends.
func (s *Registry) Mirror(ctx context.Context) {
	(&mirror{cli: s.cli, prefix: s.prefix, log: s.log, listed: s.listed, event: s.event, retry: time.Second}).run(ctx)
}

// listed applies a full list: every stored namespace, and the deletion of
// those held here that are no longer stored.
func (s *Registry) listed(kvs []*mvccpb.KeyValue, rev int64) {
	seen := map[int]bool{}
	for _, kv := range kvs {
		if port, st, ok := s.decode(kv); ok {
			seen[port] = true
			s.reg.Apply(port, st, kv.ModRevision)
		}
	}
	for port, held := range s.reg.Revisions() {
		if !seen[port] && held > 0 {
			s.reg.Apply(port, nil, rev)
		}
	}
}

func (s *Registry) event(ev *clientv3.Event) {
	if ev.Type == clientv3.EventTypeDelete {
		if port, ok := s.port(ev.Kv.Key); ok {
			s.reg.Apply(port, nil, ev.Kv.ModRevision)
		}
		return
	}
	if port, st, ok := s.decode(ev.Kv); ok {
		s.reg.Apply(port, st, ev.Kv.ModRevision)
	}
}

func (s *Registry) port(key []byte) (int, bool) {
	port, err := strconv.Atoi(strings.TrimPrefix(string(key), s.prefix))
	if err != nil || port < 1 || port > 65535 {
		s.log.Warn().Str("key", string(key)).Msg("etcd: ignoring a key under the registry prefix that names no bootstrap port")
		return 0, false
	}
	return port, true
}

func (s *Registry) decode(kv *mvccpb.KeyValue) (int, *bootstrap.NamespaceState, bool) {
	port, ok := s.port(kv.Key)
	if !ok {
		return 0, nil, false
	}
	st := &bootstrap.NamespaceState{}
	if err := json.Unmarshal(kv.Value, st); err != nil {
		s.log.Warn().Str("key", string(kv.Key)).Err(err).Msg("etcd: ignoring a stored namespace this pdlb cannot read")
		return 0, nil, false
	}
	return port, st, true
}
