package service

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes/fake"

	"pdlb/bootstrap/etcdstore/etcdtest"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestDiscoveryWithEtcdReplicas: two replicas sharing the embedded
// registry through etcd each watch the pods themselves. A prefill pod
// joins both; it registers through replica 1's registry and clients of
// replica 2 are served (the registration came through etcd, the pod
// through replica 2's own informer). Deleting the decode pod drains it on
// both. Nothing of discovery is written to etcd.
func TestDiscoveryWithEtcdReplicas(t *testing.T) {
	e := etcdtest.Start(t, "127.0.0.1")
	kube := fake.NewClientset()
	bootstrapPort := proxytest.FreePort(t)
	replica := func(host string) *kubeLB {
		return startKubeLB(t, kube, testLog(t), func(c *config.Config) {
			c.Server.Host = host
			c.Bootstrap = config.Bootstrap{Mode: "embedded", AdvertiseHost: host, ListenHost: host, InfoWait: time.Second}
			c.Cluster.Etcd = config.Default().Cluster.Etcd
			c.Cluster.Etcd.Endpoints = []string{e.Endpoint()}
		})
	}
	r1, r2 := replica("127.0.0.1"), replica("127.0.0.2")
	p, d := engine(t), decodeEngine(t, "d")
	r1.create(t, enginePod(t, "prefill-0", "prefill", p, map[string]string{"sglang.ai/bootstrap-port": strconv.Itoa(bootstrapPort)}))
	decodePod := enginePod(t, "decode-0", "decode", d, nil)
	r1.create(t, decodePod)
	for _, r := range []*kubeLB{r1, r2} {
		within(t, 5*time.Second, "both pods join "+r.url, func() bool {
			return r.svc.Pool.Find(p.URL) != nil && r.svc.Pool.Find(d.URL) != nil
		})
	}
	if code, body := r2.generate(t); code != 503 {
		t.Fatalf("before the prefill registered: %d %s, want 503", code, body)
	}
	const rank = `{"attn_tp_size":1,"attn_tp_rank":0,"attn_cp_size":1,"attn_cp_rank":0,"attn_dp_size":1,"attn_dp_rank":0,` +
		`"pp_size":1,"pp_rank":0,"system_dp_size":1,"system_dp_rank":0,"rank_ip":"127.0.0.1","rank_port":17000,` +
		`"page_size":64,"kv_cache_dtype":"auto","prefill_http_port":30000}`
	req, err := http.NewRequest(http.MethodPut, "http://127.0.0.1:"+strconv.Itoa(bootstrapPort)+"/route", strings.NewReader(rank))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if resp, body := proxytest.ReadAll(t, resp, err); resp.StatusCode != 200 {
		t.Fatalf("PUT /route through replica 1: %d %s", resp.StatusCode, body)
	}
	r2.servedBy(t, `{"from":"d"}`, "replica 2 serves with the pods it watches and the registration from etcd")
	if body := string(d.LastBody()); !strings.Contains(body, `"bootstrap_host":"127.0.0.2"`) || !strings.Contains(body, `"bootstrap_port":`+strconv.Itoa(bootstrapPort)) {
		t.Fatalf("the decode was sent %s; want replica 2's registry at the pod's bootstrap port", body)
	}

	r1.delete(t, decodePod)
	for _, r := range []*kubeLB{r1, r2} {
		within(t, 5*time.Second, "the deleted pod drained on "+r.url, func() bool { code, _ := r.generate(t); return code == 503 })
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := cli.Get(ctx, "/pdlb/workers/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 0 {
		t.Fatalf("%d workers in etcd: discovered pods must not go through etcd", got.Count)
	}
}
