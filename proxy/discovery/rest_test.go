package discovery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// apiServer answers list and watch of pods in namespace llm as the API
// server does, with JSON, and records what was asked; while forbidden it
// answers 403 as a missing RBAC grant does.
type apiServer struct {
	pod       *corev1.Pod
	forbidden atomic.Bool
	// warning is sent in a Warning header, as the API server does for a
	// deprecated API; client-go logs it through klog.
	warning string

	mu       sync.Mutex
	requests []*http.Request
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.requests = append(a.requests, r)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if a.warning != "" {
		w.Header().Set("Warning", `299 - "`+a.warning+`"`)
	}
	if r.URL.Path != "/api/v1/namespaces/llm/pods" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if a.forbidden.Load() {
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
			Message: `pods is forbidden: User "system:serviceaccount:llm:pdlb" cannot list resource "pods"`,
		})
		return
	}
	q := r.URL.Query()
	if q.Get("watch") != "true" && q.Get("watch") != "1" {
		_ = json.NewEncoder(w).Encode(corev1.PodList{
			TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "5"},
			Items:    []corev1.Pod{*a.pod},
		})
		return
	}
	event := func(typ string, obj any) {
		raw, err := json.Marshal(obj)
		if err != nil {
			panic(err)
		}
		_ = json.NewEncoder(w).Encode(metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}})
		w.(http.Flusher).Flush()
	}
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	if q.Get("sendInitialEvents") == "true" { // the first list streamed through the watch
		event("ADDED", a.pod)
		event("BOOKMARK", &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: "5", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
		})
	}
	<-r.Context().Done()
}

func (a *apiServer) asked() []*http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*http.Request(nil), a.requests...)
}

// joins is a Sink that records what joined.
type joins struct {
	mu  sync.Mutex
	got []Target
}

func (j *joins) Join(t Target) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.got = append(j.got, t)
	return nil
}

func (j *joins) Leave(Target) {}

func (j *joins) n() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.got)
}

// TestKubernetesOverREST: pdlb's own client (core/v1 types only, not
// client-go's clientset) against an HTTP API server: a missing grant is
// warned in pdlb's log and retried; once allowed, the pods of the
// selector, in the namespace, are listed and watched, and a Ready one
// joins. Protobuf is asked for first, JSON accepted, as client-go's typed
// client does. client-go's own log lines (an API server's warning) are
// pdlb's log lines while the watches run, and no longer after.
func TestKubernetesOverREST(t *testing.T) {
	api := &apiServer{warning: "v1 Pod is a test of warnings", pod: &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "prefill-0", Namespace: "llm", ResourceVersion: "5", Labels: map[string]string{"app": "sglang", "role": "prefill"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sglang", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 30000},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}}
	api.forbidden.Store(true)
	// TLS: clientcmd sends the kubeconfig's credentials over HTTPS only.
	srv := httptest.NewTLSServer(api)
	t.Cleanup(srv.Close)
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`", certificate-authority-data: `+ca+`}}]
users: [{name: u, user: {token: t0ken}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: llm}}]
current-context: x
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default().Discovery.Kubernetes
	cfg.Enabled, cfg.Kubeconfig, cfg.PrefillSelector = true, kc, "app=sglang,role=prefill"
	client, ns, err := Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &proxytest.SyncBuffer{}
	sink := &joins{}
	k, err := NewKubernetes(client, ns, cfg, sink, pdlb.Clock{}, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	if !proxytest.WaitFor(10*time.Second, func() bool {
		return strings.Contains(string(logs.Bytes()), `"level":"warn"`) && strings.Contains(string(logs.Bytes()), "forbidden")
	}) {
		t.Fatal("timed out waiting for a warning naming the missing grant")
	}
	api.forbidden.Store(false)
	if !proxytest.WaitFor(10*time.Second, func() bool { return sink.n() > 0 }) {
		t.Fatal("timed out waiting for the Ready pod to join once allowed")
	}
	sink.mu.Lock()
	got := sink.got[0]
	sink.mu.Unlock()
	if got.Pod != "llm/prefill-0" || got.Role != proxy.Prefill || got.URL != "http://10.0.0.7:30000" {
		t.Fatalf("joined %+v, want llm/prefill-0 as prefill at http://10.0.0.7:30000", got)
	}
	if !proxytest.WaitFor(10*time.Second, func() bool { return strings.Contains(string(logs.Bytes()), "pods listed") }) {
		t.Fatal("timed out waiting for the first list to be logged")
	}
	watched := false
	for _, r := range api.asked() {
		q := r.URL.Query()
		if q.Get("labelSelector") != "app=sglang,role=prefill" {
			t.Errorf("%s: labelSelector %q, want the prefill selector", r.URL, q.Get("labelSelector"))
		}
		if a := r.Header.Get("Accept"); !strings.HasPrefix(a, "application/vnd.kubernetes.protobuf") || !strings.Contains(a, "application/json") {
			t.Errorf("%s: Accept %q, want protobuf first, then JSON", r.URL, a)
		}
		if r.Header.Get("Authorization") != "Bearer t0ken" || !strings.HasPrefix(r.Header.Get("User-Agent"), "pdlb") {
			t.Errorf("%s: Authorization %q, User-Agent %q", r.URL, r.Header.Get("Authorization"), r.Header.Get("User-Agent"))
		}
		watched = watched || q.Get("watch") == "true" || q.Get("watch") == "1"
	}
	if !watched {
		t.Errorf("no watch among %d requests", len(api.asked()))
	}
	var warning map[string]any
	for _, line := range strings.Split(string(logs.Bytes()), "\n") {
		if strings.Contains(line, api.warning) {
			if err := json.Unmarshal([]byte(line), &warning); err != nil {
				t.Fatalf("client-go's warning is not a JSON line of pdlb's: %q", line)
			}
			break
		}
	}
	if warning == nil || warning["component"] != "client-go" {
		t.Fatalf("client-go's warning: %v; pdlb's log:\n%s", warning, logs.Bytes())
	}
	k.Stop()
	before := len(logs.Bytes())
	klog.Warning("after discovery stopped")
	klog.Flush()
	if len(logs.Bytes()) != before {
		t.Errorf("klog still writes to a stopped discovery's logger: %s", logs.Bytes()[before:])
	}
}

// TestRESTPodsProtobuf: what the API server answers to a client asking
// for protobuf first, a list and a watch of pods in protobuf, is read with
// the core/v1 types alone.
func TestRESTPodsProtobuf(t *testing.T) {
	codecs := serializer.NewCodecFactory(podScheme)
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	enc := codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decode-0", Namespace: "llm", ResourceVersion: "7"}, Status: corev1.PodStatus{PodIP: "10.0.0.8"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) || r.URL.Path != "/api/v1/pods" {
			t.Errorf("%s asked with Accept %q", r.URL, r.Header.Get("Accept"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("watch") != "true" {
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			if err := enc.Encode(&corev1.PodList{Items: []corev1.Pod{pod}}, w); err != nil {
				t.Error(err)
			}
			return
		}
		raw, err := runtime.Encode(enc, &pod)
		if err != nil {
			t.Error(err)
			return
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf+";stream=watch")
		err = info.StreamSerializer.Encode(&metav1.WatchEvent{Type: "MODIFIED", Object: runtime.RawExtension{Raw: raw}}, info.StreamSerializer.Framer.NewFrameWriter(w))
		if err != nil {
			t.Error(err)
		}
	}))
	t.Cleanup(srv.Close)
	client, err := newRESTPods(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	list, err := client.List(context.Background(), "", metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "decode-0" || list.Items[0].Status.PodIP != "10.0.0.8" {
		t.Fatalf("List: %+v, %v", list, err)
	}
	w, err := client.Watch(context.Background(), "", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := <-w.ResultChan()
	if p, ok := ev.Object.(*corev1.Pod); ev.Type != watch.Modified || !ok || p.Name != "decode-0" || p.ResourceVersion != "7" {
		t.Fatalf("watch event %s %#v, want decode-0 modified", ev.Type, ev.Object)
	}
}
