package etcdstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Replica is this pdlb's membership of the cluster: a lease etcd keeps
// while the replica keeps it alive (concurrency.Session), a key under
// replicas/ bound to it, and its votes to forget a prefill
// (bootstrap.forget_after), bound to it too. A replica that dies or loses
// etcd for longer than the lease's TTL drops out with all its votes, so
// the live replicas alone decide.
type Replica struct {
	cli    *clientv3.Client
	prefix string
	id     string
	ttl    int
	log    zerolog.Logger

	mu   sync.Mutex
	sess *concurrency.Session
	// voted: the lease each standing vote was cast under (one write per
	// vote, not per check).
	voted map[int]clientv3.LeaseID
}

// NewReplica names this replica id (unique: one per process) with a lease
// of ttl (whole seconds, at least 1).
func NewReplica(cli *clientv3.Client, prefix, id string, ttl time.Duration, log zerolog.Logger) *Replica {
	return &Replica{cli: cli, prefix: prefix, id: id, ttl: max(int(ttl/time.Second), 1), voted: map[int]clientv3.LeaseID{},
		log: log.With().Str("component", "etcdstore").Str("replica", id).Logger()}
}

// ID is the replica's name in etcd.
func (r *Replica) ID() string { return r.id }

// Run keeps the replica's lease and key until ctx ends, taking a new lease
// whenever the last one was lost (etcd away for longer than its TTL). At
// the end the lease is revoked, so the replica leaves at once.
func (r *Replica) Run(ctx context.Context) {
	for ctx.Err() == nil {
		sess, err := r.join(ctx)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		select {
		case <-sess.Done():
			if ctx.Err() == nil {
				r.log.Warn().Msg("etcd: this replica's lease expired (etcd unreachable longer than cluster.etcd.lease_ttl); joining again")
			}
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r.cli.Revoke(rctx, sess.Lease())
			cancel()
		}
		r.mu.Lock()
		r.sess = nil
		r.mu.Unlock()
		sess.Orphan()
	}
}

func (r *Replica) join(ctx context.Context) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease, err := r.cli.Grant(gctx, int64(r.ttl))
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(r.cli, concurrency.WithLease(lease.ID), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if _, err := r.cli.Put(gctx, r.prefix+"replicas/"+r.id, time.Now().UTC().Format(time.RFC3339), clientv3.WithLease(sess.Lease())); err != nil {
		sess.Orphan()
		r.cli.Revoke(gctx, sess.Lease())
		return nil, err
	}
	r.mu.Lock()
	r.sess = sess
	r.mu.Unlock()
	r.log.Info().Int("lease_ttl_s", r.ttl).Msg("joined the pdlb cluster in etcd")
	return sess, nil
}

func (r *Replica) lease() (clientv3.LeaseID, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == nil {
		return 0, false
	}
	return r.sess.Lease(), true
}

func (r *Replica) voteKey(port int, id string) string {
	return r.prefix + "forget/" + strconv.Itoa(port) + "/" + id
}

// Vote records that this replica's health checks have failed the prefill
// of port for bootstrap.forget_after, since a time when its namespace was
// at revision rev, and resets the namespace when every live replica has
// voted so for the same revision: no replica still reaches the prefill,
// and nobody registered since any of them lost it (a prefill that came
// back and registered again is not forgotten). It reports whether this
// vote reset it.
func (r *Replica) Vote(ctx context.Context, port int, rev int64) (bool, error) {
	lease, ok := r.lease()
	if !ok {
		return false, fmt.Errorf("no lease yet")
	}
	r.mu.Lock()
	cast := r.voted[port] == lease
	r.mu.Unlock()
	if !cast {
		if _, err := r.cli.Put(ctx, r.voteKey(port, r.id), strconv.FormatInt(rev, 10), clientv3.WithLease(lease)); err != nil {
			return false, err
		}
		r.mu.Lock()
		r.voted[port] = lease
		r.mu.Unlock()
	}
	return r.tryForget(ctx, port)
}

// Unvote withdraws this replica's vote (its health checks pass again).
func (r *Replica) Unvote(ctx context.Context, port int) error {
	r.mu.Lock()
	delete(r.voted, port)
	r.mu.Unlock()
	_, err := r.cli.Delete(ctx, r.voteKey(port, r.id))
	return err
}

// tryForget reads the live replicas, the votes and the namespace in one
// snapshot, and deletes the namespace if the vote is unanimous, in a
// transaction that fails if any of them changed since (a vote withdrawn,
// a replica joined, a registration).
func (r *Replica) tryForget(ctx context.Context, port int) (bool, error) {
	replicas, votes := r.prefix+"replicas/", r.prefix+"forget/"+strconv.Itoa(port)+"/"
	ns := r.prefix + "registry/" + strconv.Itoa(port)
	snap, err := r.cli.Txn(ctx).Then(
		clientv3.OpGet(replicas, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(votes, clientv3.WithPrefix()),
		clientv3.OpGet(ns, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return false, err
	}
	live := snap.Responses[0].GetResponseRange().Kvs
	cast := map[string]*struct {
		rev, modRev int64
	}{}
	for _, kv := range snap.Responses[1].GetResponseRange().Kvs {
		v, _ := strconv.ParseInt(string(kv.Value), 10, 64)
		cast[strings.TrimPrefix(string(kv.Key), votes)] = &struct{ rev, modRev int64 }{v, kv.ModRevision}
	}
	nsKVs := snap.Responses[2].GetResponseRange().Kvs
	if len(nsKVs) == 0 || len(live) == 0 {
		return false, nil // nothing registered, or this replica's lease just lapsed
	}
	nsRev := nsKVs[0].ModRevision
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(ns), "=", nsRev),
		// No replica joined since the snapshot (it has not voted).
		clientv3.Compare(clientv3.CreateRevision(replicas), "<", snap.Header.Revision+1).WithPrefix(),
	}
	for _, kv := range live {
		id := strings.TrimPrefix(string(kv.Key), replicas)
		v, ok := cast[id]
		if !ok || v.rev != nsRev {
			return false, nil
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(r.voteKey(port, id)), "=", v.modRev))
	}
	resp, err := r.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(ns), clientv3.OpDelete(votes, clientv3.WithPrefix())).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
