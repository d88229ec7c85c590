package service

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// The tests drive client-go's informers with its fake clientset (the one
// stand-in: there is no API server here) and look at what pdlb serves:
// real requests through pdlb to real loopback engines, whose ports the
// pods name.

const testNamespace = "llm"

// kubeLB is a Service discovering its engines in a fake API server.
type kubeLB struct {
	url  string
	svc  *Service
	kube *fake.Clientset
}

// fakePods lists and watches pods through client-go's fake clientset,
// where pdlb's own client asks the API server.
type fakePods struct{ c *fake.Clientset }

func (p fakePods) List(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.PodList, error) {
	return p.c.CoreV1().Pods(ns).List(ctx, o)
}

func (p fakePods) Watch(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
	return p.c.CoreV1().Pods(ns).Watch(ctx, o)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector that the
// fake clientset cannot stream the first list through a watch.
func (p fakePods) IsWatchListSemanticsUnSupported() bool {
	return p.c.IsWatchListSemanticsUnSupported()
}

// startKubeLB runs a Service with discovery.kubernetes on (app=sglang,
// role=prefill|decode in namespace llm) and no static engine unless cfg's
// change adds some.
func startKubeLB(t *testing.T, client *fake.Clientset, log zerolog.Logger, change ...func(*config.Config)) *kubeLB {
	t.Helper()
	return startKubeLBWith(t, client, log, nil, change...)
}

func startKubeLBWith(t *testing.T, client *fake.Clientset, log zerolog.Logger, opts []Option, change ...func(*config.Config)) *kubeLB {
	t.Helper()
	cfg := testConfig()
	cfg.Discovery.Kubernetes = config.Default().Discovery.Kubernetes
	k := &cfg.Discovery.Kubernetes
	k.Enabled, k.Namespace = true, testNamespace
	k.PrefillSelector, k.DecodeSelector = "app=sglang,role=prefill", "app=sglang,role=decode"
	for _, c := range change {
		c(&cfg)
	}
	svc, err := New(&cfg, log, append(opts, WithKubernetes(fakePods{client}))...)
	if err != nil {
		t.Fatal(err)
	}
	svc.admin.drainPoll = 5 * time.Millisecond
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return &kubeLB{url: "http://" + svc.Addr(), svc: svc, kube: client}
}

// enginePod is a Running, Ready pod of role whose container port "http"
// is e's port, at e's IP.
func enginePod(t *testing.T, name, role string, e *proxytest.Engine, annotations map[string]string) *corev1.Pod {
	t.Helper()
	host, port := hostPort(t, e.URL)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, Labels: map[string]string{"app": "sglang", "role": role}, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sglang", Ports: []corev1.ContainerPort{
			{Name: "metrics", ContainerPort: 9090},
			{Name: "http", ContainerPort: int32(port)},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: host, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func hostPort(t *testing.T, url string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return host, n
}

func setReady(p *corev1.Pod, ready bool) *corev1.Pod {
	p = p.DeepCopy()
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	if ready {
		p.Status.Conditions[0].Status = corev1.ConditionTrue
	}
	return p
}

func (l *kubeLB) create(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := l.kube.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (l *kubeLB) update(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := l.kube.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (l *kubeLB) delete(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if err := l.kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// generate sends one request through pdlb.
func (l *kubeLB) generate(t *testing.T) (int, string) {
	t.Helper()
	return send(t, "POST", l.url+"/generate", `{"text":"hi"}`)
}

// servedBy waits until a request is answered 200 with body (a decode's
// answer), then checks that the next ones are all so.
func (l *kubeLB) servedBy(t *testing.T, body, what string) {
	t.Helper()
	within(t, 5*time.Second, what, func() bool { code, got := l.generate(t); return code == 200 && got == body })
	for range 10 {
		if code, got := l.generate(t); code != 200 || got != body {
			t.Fatalf("%s: then answered %d %s", what, code, got)
		}
	}
}

// decodeEngine answers every request with its name.
func decodeEngine(t *testing.T, name string) *proxytest.Engine {
	return proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"from":"`+name+`"}`))
}

// metric is one sample's value in pdlb's /metrics ("absent" without it).
func (l *kubeLB) metric(t *testing.T, sample string) string {
	t.Helper()
	_, body := send(t, "GET", l.url+"/metrics", "")
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return "absent"
}

// TestDiscoveryReadyPodsJoin: with no pod pdlb has nothing to serve with;
// Ready pods of each role join and serve; a pod that is not Ready (yet)
// does not, until it turns Ready.
func TestDiscoveryReadyPodsJoin(t *testing.T) {
	l := startKubeLB(t, fake.NewClientset(), testLog(t))
	if code, body := l.generate(t); code != 503 {
		t.Fatalf("no pod yet: %d %s, want 503", code, body)
	}
	p, d1, d2 := engine(t), decodeEngine(t, "d1"), decodeEngine(t, "d2")
	l.create(t, enginePod(t, "prefill-0", "prefill", p, nil))
	l.create(t, enginePod(t, "decode-0", "decode", d1, nil))
	pod2 := setReady(enginePod(t, "decode-1", "decode", d2, nil), false)
	l.create(t, pod2)
	l.servedBy(t, `{"from":"d1"}`, "the Ready decode serves, the unready one does not")
	if d2.Count() != 0 {
		t.Fatalf("the unready pod's engine got %d requests", d2.Count())
	}
	if v := l.metric(t, `pdlb_discovery_pods{role="decode"}`); v != "1" {
		t.Fatalf(`pdlb_discovery_pods{role="decode"} = %s, want 1`, v)
	}
	l.update(t, setReady(pod2, true))
	within(t, 5*time.Second, "the pod turned Ready serves", func() bool { _, body := l.generate(t); return body == `{"from":"d2"}` })
	if v := l.metric(t, `pdlb_discovery_pods{role="decode"}`); v != "2" {
		t.Fatalf(`pdlb_discovery_pods{role="decode"} = %s, want 2`, v)
	}
	if v := l.metric(t, `pdlb_discovery_pods{role="prefill"}`); v != "1" {
		t.Fatalf(`pdlb_discovery_pods{role="prefill"} = %s, want 1`, v)
	}
}

// TestDiscoveryNotReadyDrains: a pod that turns not Ready leaves selection
// at once, but the request it is serving finishes (a drain, as DELETE
// /workers does), and its connections close after.
func TestDiscoveryNotReadyDrains(t *testing.T) {
	release := make(chan struct{})
	slow := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		<-release
		ctx.SetBodyString(`{"from":"slow"}`)
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	l := startKubeLB(t, fake.NewClientset(), testLog(t))
	l.create(t, enginePod(t, "prefill-0", "prefill", engine(t), nil))
	slowPod := enginePod(t, "decode-0", "decode", slow, nil)
	l.create(t, slowPod)
	within(t, 5*time.Second, "the decode pod joins", func() bool { return l.svc.Pool.Find(slow.URL) != nil })
	inflight := make(chan string, 1)
	go func() {
		code, body := l.generate(t)
		inflight <- strconv.Itoa(code) + " " + body
	}()
	within(t, 5*time.Second, "the request reaches the slow decode", func() bool { return slow.Count() == 1 })

	l.create(t, enginePod(t, "decode-1", "decode", decodeEngine(t, "d2"), nil))
	l.update(t, setReady(slowPod, false))
	l.servedBy(t, `{"from":"d2"}`, "new requests go to the Ready decode only")
	if slow.Count() != 1 {
		t.Fatalf("the not-Ready pod's engine got %d requests, want only the one in flight", slow.Count())
	}
	close(release)
	if got := <-inflight; got != `200 {"from":"slow"}` {
		t.Fatalf("the request in flight on the drained pod: %s", got)
	}
	if !slow.WaitClosed(5 * time.Second) {
		t.Fatal("the drained pod's connections were not closed once its request was done")
	}
}

// TestDiscoveryDeletedPodLeaves: a deleted pod's engine gets no more
// requests, and with the last decode gone pdlb answers 503 again.
func TestDiscoveryDeletedPodLeaves(t *testing.T) {
	l := startKubeLB(t, fake.NewClientset(), testLog(t))
	d1, d2 := decodeEngine(t, "d1"), decodeEngine(t, "d2")
	l.create(t, enginePod(t, "prefill-0", "prefill", engine(t), nil))
	pod1, pod2 := enginePod(t, "decode-0", "decode", d1, nil), enginePod(t, "decode-1", "decode", d2, nil)
	l.create(t, pod1)
	l.create(t, pod2)
	within(t, 5*time.Second, "both decodes serve", func() bool {
		l.generate(t)
		return d1.Count() > 0 && d2.Count() > 0
	})
	l.delete(t, pod2)
	l.servedBy(t, `{"from":"d1"}`, "the deleted pod's engine gets no more requests")
	l.delete(t, pod1)
	within(t, 5*time.Second, "no decode left: 503", func() bool { code, _ := l.generate(t); return code == 503 })
	if v := l.metric(t, `pdlb_discovery_pods{role="decode"}`); v != "0" {
		t.Fatalf(`pdlb_discovery_pods{role="decode"} = %s, want 0`, v)
	}
}

// TestDiscoveryLabelMoveBetweenRoles: a pod relabelled from decode to
// prefill leaves the decodes and joins the prefills with its bootstrap
// port annotation: the decode it is paired with is told that port.
func TestDiscoveryLabelMoveBetweenRoles(t *testing.T) {
	l := startKubeLB(t, fake.NewClientset(), testLog(t))
	p, x, d := engine(t), decodeEngine(t, "x"), decodeEngine(t, "d")
	prefill := enginePod(t, "prefill-0", "prefill", p, map[string]string{"sglang.ai/bootstrap-port": "9001"})
	l.create(t, prefill)
	mover := enginePod(t, "engine-x", "decode", x, map[string]string{"sglang.ai/bootstrap-port": "9100"})
	l.create(t, mover)
	l.servedBy(t, `{"from":"x"}`, "x serves as the decode")
	if body := string(x.LastBody()); !strings.Contains(body, `"bootstrap_port":9001`) {
		t.Fatalf("x as decode was sent %s, want prefill-0's bootstrap port 9001", body)
	}

	l.create(t, enginePod(t, "decode-0", "decode", d, nil))
	moved := mover.DeepCopy()
	moved.Labels["role"] = "prefill"
	l.update(t, moved)
	l.delete(t, prefill)
	l.servedBy(t, `{"from":"d"}`, "x no longer answers as a decode")
	within(t, 5*time.Second, "x is the prefill now", func() bool {
		l.generate(t)
		return strings.Contains(string(d.LastBody()), `"bootstrap_port":9100`)
	})
	for range 5 {
		if code, body := l.generate(t); code != 200 || body != `{"from":"d"}` || !strings.Contains(string(d.LastBody()), `"bootstrap_port":9100`) {
			t.Fatalf("after the move: %d %s, decode sent %s; want x as the only prefill", code, body, d.LastBody())
		}
	}
	if v := l.metric(t, `pdlb_discovery_pods{role="prefill"}`); v != "1" {
		t.Fatalf(`pdlb_discovery_pods{role="prefill"} = %s, want 1 (x)`, v)
	}
}

// TestDiscoveryBadPortsSkipped: a Ready pod without a usable HTTP port is
// skipped with one warning however often it changes, never served, never a
// panic; the http-port annotation wins over the named port; a fixed pod
// joins.
func TestDiscoveryBadPortsSkipped(t *testing.T) {
	logs := &proxytest.SyncBuffer{}
	l := startKubeLB(t, fake.NewClientset(), zerolog.New(logs))
	l.create(t, enginePod(t, "prefill-0", "prefill", engine(t), nil))
	d, good := decodeEngine(t, "bad"), decodeEngine(t, "good")
	noPort := enginePod(t, "no-port", "decode", d, nil)
	noPort.Spec.Containers[0].Ports = noPort.Spec.Containers[0].Ports[:1] // "metrics" only
	badAnnotation := enginePod(t, "bad-annotation", "decode", d, map[string]string{"sglang.ai/http-port": "http"})
	badBootstrap := enginePod(t, "bad-bootstrap", "prefill", d, map[string]string{"sglang.ai/bootstrap-port": "70000"})
	// The named port points at nothing; the annotation at the engine.
	annotated := enginePod(t, "annotated", "decode", good, map[string]string{"sglang.ai/http-port": strconv.Itoa(func() int { _, p := hostPort(t, good.URL); return p }())})
	annotated.Spec.Containers[0].Ports[1].ContainerPort = 1
	for _, p := range []*corev1.Pod{noPort, badAnnotation, badBootstrap, annotated} {
		l.create(t, p)
	}
	l.servedBy(t, `{"from":"good"}`, "the annotated pod serves on its annotation's port")
	for i := range 3 { // changes that do not fix them: no new warning
		for _, p := range []*corev1.Pod{noPort, badAnnotation, badBootstrap} {
			p = p.DeepCopy()
			p.Labels["touch"] = strconv.Itoa(i)
			l.update(t, p)
		}
	}
	l.servedBy(t, `{"from":"good"}`, "the pods without a usable port get nothing")
	if d.Count() != 0 {
		t.Fatalf("an engine behind bad ports got %d requests", d.Count())
	}
	for pod, why := range map[string]string{
		"no-port":        `no HTTP port: no container port named \"http\"`,
		"bad-annotation": `annotation sglang.ai/http-port: \"http\" is not a port`,
		"bad-bootstrap":  `annotation sglang.ai/bootstrap-port: \"70000\" is not a port`,
	} {
		if n := countLines(logs.Bytes(), `"pod":"`+testNamespace+"/"+pod+`"`, `"level":"warn"`); n != 1 {
			t.Errorf("pod %s: %d warnings, want 1:\n%s", pod, n, logs.Bytes())
		}
		if !strings.Contains(string(logs.Bytes()), why) {
			t.Errorf("pod %s: no warning saying %s:\n%s", pod, why, logs.Bytes())
		}
	}
	fixed := noPort.DeepCopy()
	fixed.Annotations = map[string]string{"sglang.ai/http-port": strconv.Itoa(func() int { _, p := hostPort(t, d.URL); return p }())}
	l.update(t, fixed)
	within(t, 5*time.Second, "the fixed pod serves", func() bool { _, body := l.generate(t); return body == `{"from":"bad"}` })
}

func countLines(logs []byte, all ...string) int {
	n := 0
	for line := range strings.SplitSeq(string(logs), "\n") {
		ok := true
		for _, s := range all {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}

// TestDiscoveryWithStaticBackends: the config file's engines and the
// pods' serve side by side; a reload of the file keeps the pods' engines;
// a pod whose URL the file lists already is not added twice; the join and
// the leave are logged at info with the pod and its URL.
func TestDiscoveryWithStaticBackends(t *testing.T) {
	logs := &proxytest.SyncBuffer{}
	p, static, podEngine := engine(t), decodeEngine(t, "static"), decodeEngine(t, "pod")
	l := startKubeLB(t, fake.NewClientset(), zerolog.New(logs), func(c *config.Config) {
		c.Prefill = []config.Prefill{{URL: p.URL}}
		c.Decode = []config.Decode{{URL: static.URL}}
		c.Discovery.Kubernetes.PrefillSelector = "" // prefills from the file only
	})
	l.servedBy(t, `{"from":"static"}`, "the file's decode serves before any pod")
	pod := enginePod(t, "decode-0", "decode", podEngine, nil)
	l.create(t, pod)
	dup := enginePod(t, "decode-dup", "decode", static, nil)
	l.create(t, dup)
	for i := range 3 { // its status changes: no new warning
		dup = dup.DeepCopy()
		dup.Status.Conditions[0].LastProbeTime = metav1.NewTime(time.Unix(int64(i), 0))
		l.update(t, dup)
	}
	within(t, 5*time.Second, "the pod's decode serves beside the file's", func() bool { _, body := l.generate(t); return body == `{"from":"pod"}` })

	cfg := *l.svc.Config()
	cfg.Timeouts.DecodeIdle = time.Minute
	cfg.Discovery.Kubernetes.DecodeSelector = "app=other" // read at start only: kept, and said so
	if err := l.svc.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if got := l.svc.Config(); got.Discovery.Kubernetes.DecodeSelector != "app=sglang,role=decode" || got.Timeouts.DecodeIdle != time.Minute {
		t.Fatalf("after the reload: decode_selector %q, decode_idle %v; want the running selector kept, the timeout applied",
			got.Discovery.Kubernetes.DecodeSelector, got.Timeouts.DecodeIdle)
	}
	if !strings.Contains(string(logs.Bytes()), `"keys":["discovery"]`) {
		t.Errorf("the reload did not say discovery keeps its running values:\n%s", logs.Bytes())
	}
	before := podEngine.Count()
	within(t, 5*time.Second, "the pod's decode still serves after a reload", func() bool { _, body := l.generate(t); return podEngine.Count() > before && body == `{"from":"pod"}` })
	if v := l.metric(t, `pdlb_discovery_pods{role="decode"}`); v != "1" {
		t.Fatalf(`pdlb_discovery_pods{role="decode"} = %s, want 1 (the duplicate is not a second backend)`, v)
	}
	if n := countLines(logs.Bytes(), `"pod":"llm/decode-dup"`, `"level":"warn"`, "is a backend already"); n != 1 {
		t.Errorf("the pod whose URL the file lists: %d warnings, want 1:\n%s", n, logs.Bytes())
	}
	l.delete(t, pod)
	l.servedBy(t, `{"from":"static"}`, "the file's decode alone after the pod is deleted")
	l.delete(t, dup) // it never joined: the file's decode stays
	l.servedBy(t, `{"from":"static"}`, "the file's decode stays when the duplicate pod goes")
	for _, msg := range []string{"pod joined", "pod left, draining"} {
		if n := countLines(logs.Bytes(), `"level":"info"`, `"pod":"llm/decode-0"`, `"url":"`+podEngine.URL+`"`, msg); n != 1 {
			t.Errorf("%q logged %d times with the pod and its URL, want 1", msg, n)
		}
	}
}

// TestDiscoveryForbiddenIsLogged: while the API server refuses to list pods
// (RBAC not granted yet) pdlb says so in its own log at warn, and again
// that no list came after 10 s (on a clock a hundred times faster), and
// serves its file's engines; once allowed, the pods join without a
// restart and the first list is logged.
func TestDiscoveryForbiddenIsLogged(t *testing.T) {
	logs := &proxytest.SyncBuffer{}
	kube := fake.NewClientset()
	var forbidden atomic.Bool
	forbidden.Store(true)
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if forbidden.Load() {
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", nil)
		}
		return false, nil, nil
	})
	p, static, d := engine(t), decodeEngine(t, "static"), decodeEngine(t, "pod")
	fast := pdlb.Clock{Sleep: func(ctx context.Context, d time.Duration) error { return pdlb.SleepContext(ctx, d/100) }}
	l := startKubeLBWith(t, kube, zerolog.New(logs), []Option{withClock(fast)}, func(c *config.Config) {
		c.Prefill = []config.Prefill{{URL: p.URL}}
		c.Decode = []config.Decode{{URL: static.URL}}
	})
	l.create(t, enginePod(t, "decode-0", "decode", d, nil))
	within(t, 5*time.Second, "a warning that no list came after 10s", func() bool {
		return countLines(logs.Bytes(), `"level":"warn"`, "pods not listed yet", `"waited":10000`) == 1
	})
	within(t, 5*time.Second, "a warning naming the missing grant", func() bool {
		return countLines(logs.Bytes(), `"level":"warn"`, "needs get, list and watch on pods", "forbidden") > 0
	})
	l.servedBy(t, `{"from":"static"}`, "the file's decode serves meanwhile")
	forbidden.Store(false)
	within(t, 30*time.Second, "the pod joins once listing is allowed", func() bool { _, body := l.generate(t); return body == `{"from":"pod"}` })
	within(t, 5*time.Second, "the first list is logged", func() bool { return countLines(logs.Bytes(), "pods listed") == 1 })
}
