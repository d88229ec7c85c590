package discovery

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
)

// Sink is what discovery changes: the pool of backends.
type Sink interface {
	// Join adds t's engine; an error (its URL is a backend already, from
	// the config file or the admin API) leaves it out, said at warn.
	Join(t Target) error
	// Leave drains t's engine: no new requests, the ones in flight finish.
	Leave(t Target)
}

// Kubernetes keeps a Sink's backends equal to the Ready pods of the
// selectors: one informer per role, their events reconciled per pod.
type Kubernetes struct {
	client    Pods
	namespace string
	sink      Sink
	ports     ports
	log       zerolog.Logger
	roles     []roleSelector

	// mu serialises the two informers' events (a pod moving between roles
	// is seen by both) and guards pods.
	mu   sync.Mutex
	pods map[string]*podState // by "namespace/name"

	informers []cache.SharedIndexInformer
	clock     pdlb.Clock
	ctx       context.Context // ends at Stop
	cancel    context.CancelFunc
	stopOnce  sync.Once
	wg        sync.WaitGroup // the informers and the first-list watcher
	// clientGoLog is where client-go's own lines go while the watches run;
	// releaseKlog hands them back (klog.go), nil until Start.
	clientGoLog zerolog.Logger
	releaseKlog func()
}

type roleSelector struct {
	role proxy.Role
	sel  labels.Selector
}

// podState is one pod as the informers last told it.
type podState struct {
	// seen is each role's informer's verdict (index: the role); nil target:
	// the pod runs no engine of that role.
	seen map[proxy.Role]*Target
	// joined is what the Sink holds for the pod; nil: nothing.
	joined *Target
	// warned is the problem last logged at warn, so that it is said once.
	warned string
}

// NewKubernetes watches namespace ("" for all) through client; cfg is
// valid (config.Validate); clock paces the first list's check.
func NewKubernetes(client Pods, namespace string, cfg config.Kubernetes, sink Sink, clock pdlb.Clock, log zerolog.Logger) (*Kubernetes, error) {
	k := &Kubernetes{
		client: client, namespace: namespace, sink: sink,
		ports:       ports{httpName: cfg.HTTPPortName, httpAnnotation: cfg.HTTPPortAnnotation, bootstrapAnnotation: cfg.BootstrapPortAnnotation},
		log:         log.With().Str("component", "discovery").Logger(),
		clientGoLog: log.With().Str("component", "client-go").Logger(),
		pods:        map[string]*podState{},
		clock:       clock.OrSystem(),
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	for _, r := range []struct {
		role proxy.Role
		sel  string
	}{{proxy.Prefill, cfg.PrefillSelector}, {proxy.Decode, cfg.DecodeSelector}} {
		if r.sel == "" {
			continue
		}
		sel, err := config.ParseSelector(r.sel)
		if err != nil {
			return nil, fmt.Errorf("discovery.kubernetes.%s_selector: %w", r.role, err)
		}
		k.roles = append(k.roles, roleSelector{r.role, sel})
	}
	return k, nil
}

// Start lists and watches the pods in the background; the pods found
// join as the lists arrive.
func (k *Kubernetes) Start() error {
	k.releaseKlog = routeKlog(k.clientGoLog)
	for _, rs := range k.roles {
		// The API server sends this role's pods only; a pod whose labels
		// stop matching is deleted from this informer's view.
		sel := rs.sel.String()
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel
				return k.client.List(ctx, k.namespace, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel
				return k.client.Watch(ctx, k.namespace, o)
			},
		}
		// No resync (0): the pods' own events are enough; a resync would
		// replay every pod through reconcile for nothing. The client says
		// whether it can stream the first list through a watch (the fake
		// clientset cannot), as client-go's informer factory asks it.
		inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, k.client), &corev1.Pod{}, 0, cache.Indexers{})
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { k.observe(rs, obj, false) },
			UpdateFunc: func(_, obj any) { k.observe(rs, obj, false) },
			DeleteFunc: func(obj any) { k.observe(rs, obj, true) },
		})
		if err != nil {
			return fmt.Errorf("discovery: %v", err)
		}
		// In pdlb's log rather than only client-go's own (klog, stderr): a
		// missing RBAC grant shows here, retried with backoff meanwhile.
		role := rs.role.String()
		err = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			k.log.Warn().Err(err).Str("role", role).Msg("listing or watching pods failed; retrying (pdlb needs get, list and watch on pods)")
		})
		if err != nil {
			return fmt.Errorf("discovery: %v", err)
		}
		k.informers = append(k.informers, inf)
	}
	for _, inf := range k.informers {
		k.wg.Go(func() { inf.RunWithContext(k.ctx) })
	}
	ns := k.namespace
	if ns == "" {
		ns = "(all)"
	}
	sels := zerolog.Dict()
	for _, rs := range k.roles {
		sels.Str(rs.role.String(), rs.sel.String())
	}
	k.log.Info().Str("namespace", ns).Dict("selectors", sels).Msg("watching pods")
	k.wg.Go(k.watchFirstList)
	return nil
}

// listCheck is how often the first list is looked for; listWarn how long
// it may take before pdlb says so (and again each listWarn).
const (
	listCheck = 100 * time.Millisecond
	listWarn  = 10 * time.Second
)

// watchFirstList logs the first list of every informer, and warns while
// there is none: client-go retries an unreachable API server on its own
// and says so only in its debug log.
func (k *Kubernetes) watchFirstList() {
	for waited := time.Duration(0); ; {
		if k.clock.Sleep(k.ctx, listCheck) != nil {
			return
		}
		waited += listCheck
		if k.synced() {
			n := k.Joined()
			k.log.Info().Int("prefill", n[proxy.Prefill]).Int("decode", n[proxy.Decode]).Msg("pods listed; watching for changes")
			return
		}
		if waited%listWarn == 0 {
			k.log.Warn().Dur("waited", waited).Msg("pods not listed yet: is the API server reachable? (client-go keeps retrying)")
		}
	}
}

func (k *Kubernetes) synced() bool {
	for _, inf := range k.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Stop ends the watches and waits for the informers' goroutines; the
// backends that joined stay (pdlb is shutting down, or they are served
// by someone else's reckoning from now on).
func (k *Kubernetes) Stop() {
	k.stopOnce.Do(func() {
		k.cancel()
		k.wg.Wait()
		if k.releaseKlog != nil {
			k.releaseKlog()
		}
	})
}

// Joined counts the pods serving per role.
func (k *Kubernetes) Joined() map[proxy.Role]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := map[proxy.Role]int{proxy.Prefill: 0, proxy.Decode: 0}
	for _, st := range k.pods {
		if st.joined != nil {
			n[st.joined.Role]++
		}
	}
	return n
}

// observe takes one informer event for rs's role.
func (k *Kubernetes) observe(rs roleSelector, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	v := verdict{why: "deleted"}
	switch {
	case deleted:
	case !rs.sel.Matches(labels.Set(pod.Labels)):
		v.why = "labels no longer match the " + rs.role.String() + " selector"
	case k.matchesOther(rs.role, pod):
		v = verdict{why: "labels match both prefill_selector and decode_selector", warn: true}
	default:
		v = k.ports.read(rs.role, pod)
	}
	k.reconcile(rs.role, key, v, deleted)
}

func (k *Kubernetes) matchesOther(role proxy.Role, pod *corev1.Pod) bool {
	for _, rs := range k.roles {
		if rs.role != role && rs.sel.Matches(labels.Set(pod.Labels)) {
			return true
		}
	}
	return false
}

// reconcile records role's verdict on the pod and makes the Sink hold
// what the pod runs now: it leaves its old role and joins the new one.
// Between the two informers' events of a pod moving roles, the pod keeps
// the role it has.
func (k *Kubernetes) reconcile(role proxy.Role, key string, v verdict, deleted bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.pods[key]
	if st == nil {
		if v.target == nil && !v.warn {
			return // a pod of no interest: not ready, another's, gone
		}
		st = &podState{seen: map[proxy.Role]*Target{}}
		k.pods[key] = st
	}
	st.seen[role] = v.target
	// A problem is said once: again only when it changes, or after the
	// pod served in between.
	if v.warn && st.warned != v.why {
		st.warned = v.why
		k.log.Warn().Str("pod", key).Str("role", role.String()).Msg("pod skipped: " + v.why)
	}
	want := v.target
	if want == nil {
		want = st.seen[other(role)]
	}
	// Moving between roles, the pod keeps the one it has until that
	// role's informer lets it go: each informer sees the move on its own.
	if j := st.joined; j != nil && want != nil && want.Role != j.Role && st.seen[j.Role] != nil {
		want = st.seen[j.Role]
	}
	if !st.joined.same(want) {
		if old := st.joined; old != nil {
			st.joined = nil
			k.sink.Leave(*old)
			why := v.why
			if v.target != nil {
				why = "now " + v.target.Role.String() + " at " + v.target.URL
			}
			k.log.Info().Str("pod", key).Str("role", old.Role.String()).Str("url", old.URL).Str("reason", why).Msg("pod left, draining")
		}
		if want != nil {
			if err := k.sink.Join(*want); err != nil {
				if msg := "not added: " + err.Error(); st.warned != msg {
					st.warned = msg
					k.log.Warn().Str("pod", key).Str("role", want.Role.String()).Str("url", want.URL).Msg("pod skipped: " + msg)
				}
			} else {
				st.joined, st.warned = want, ""
				k.log.Info().Str("pod", key).Str("role", want.Role.String()).Str("url", want.URL).Msg("pod joined")
			}
		}
	}
	if st.joined == nil && (deleted || st.warned == "") && !anySeen(st) {
		delete(k.pods, key)
	}
}

func other(r proxy.Role) proxy.Role {
	if r == proxy.Prefill {
		return proxy.Decode
	}
	return proxy.Prefill
}

func anySeen(st *podState) bool {
	for _, t := range st.seen {
		if t != nil {
			return true
		}
	}
	return false
}
