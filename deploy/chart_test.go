// Package deploy holds no Go code: its tests check what deploy/ ships (the
// Helm chart, the Dockerfile) with the real tools and pdlb's own config
// loader.
package deploy

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"pdlb/config"
)

// helmModule is the Helm release the chart is rendered with: `go run` of a
// pinned module version needs no helm install, and once built it runs from
// Go's build cache (offline). .ci/run builds it before the tests start.
const helmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"

// readChart reads every file of the chart. helm reads them in another
// process, which go test's result cache does not see; reading them here
// makes a change to the chart run the tests again.
func readChart(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(".", "helm", "pdlb"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			_, err = os.ReadFile(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// helmTemplate renders the chart with an extra values file.
func helmTemplate(t *testing.T, values string) ([]byte, error) {
	t.Helper()
	readChart(t)
	args := []string{"run", helmModule, "template", "rel", filepath.Join(".", "helm", "pdlb"), "--namespace", "llm"}
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return out, nil
}

// rendered is a rendered chart, decoded strictly into the Kubernetes API's
// own types: a field the API does not know fails the test.
type rendered struct {
	deployment     *appsv1.Deployment
	services       []*corev1.Service
	configMap      *corev1.ConfigMap
	pdb            *policyv1.PodDisruptionBudget
	serviceAccount *corev1.ServiceAccount
	// RBAC for discovery: a Role and RoleBinding, or with every namespace
	// watched a ClusterRole and ClusterRoleBinding.
	role               *rbacv1.Role
	roleBinding        *rbacv1.RoleBinding
	clusterRole        *rbacv1.ClusterRole
	clusterRoleBinding *rbacv1.ClusterRoleBinding
}

func render(t *testing.T, values string) rendered {
	t.Helper()
	out, err := helmTemplate(t, values)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var r rendered
	for _, doc := range strings.Split(string(out), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered document: %v\n%s", err, doc)
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			obj = fresh(&r.deployment)
		case "v1 Service":
			s := &corev1.Service{}
			r.services = append(r.services, s)
			obj = s
		case "v1 ConfigMap":
			obj = fresh(&r.configMap)
		case "policy/v1 PodDisruptionBudget":
			obj = fresh(&r.pdb)
		case "v1 ServiceAccount":
			obj = fresh(&r.serviceAccount)
		case "rbac.authorization.k8s.io/v1 Role":
			obj = fresh(&r.role)
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			obj = fresh(&r.roleBinding)
		case "rbac.authorization.k8s.io/v1 ClusterRole":
			obj = fresh(&r.clusterRole)
		case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
			obj = fresh(&r.clusterRoleBinding)
		default:
			t.Fatalf("the chart renders an object the test does not check: %s %s", meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s does not decode strictly: %v\n%s", meta.Kind, err, doc)
		}
	}
	if r.deployment == nil || r.configMap == nil || len(r.services) == 0 {
		t.Fatalf("the chart renders no Deployment, ConfigMap or Service:\n%s", out)
	}
	return r
}

// fresh points *p at a new T to decode a document into.
func fresh[T any](p **T) *T {
	*p = new(T)
	return *p
}

// testPodIP stands for the pod's IP (the downward API's status.podIP).
const testPodIP = "10.244.0.9"

// pdlbConfig loads the ConfigMap's config.yaml with pdlb's own loader and
// validation, with the container's environment.
func (r rendered) pdlbConfig(t *testing.T) *config.Config {
	t.Helper()
	data, ok := r.configMap.Data["config.yaml"]
	if !ok {
		t.Fatal("the ConfigMap has no config.yaml")
	}
	var env []string
	for _, e := range r.deployment.Spec.Template.Spec.Containers[0].Env {
		value := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			value = testPodIP
		case e.ValueFrom != nil:
			value = "from-a-secret"
		}
		env = append(env, e.Name+"="+value)
	}
	cfg, err := config.Load(config.Source{Data: []byte(data), Env: env})
	if err != nil {
		t.Fatalf("pdlb does not load the chart's config: %v\n%s", err, data)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("pdlb rejects the chart's config: %v\n%s", err, data)
	}
	return cfg
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return 0
}

// TestChartDefaults: the default values render a Deployment whose probes,
// ports, grace period and Services agree with the config pdlb will read.
func TestChartDefaults(t *testing.T) {
	r := render(t, `config:
  prefill: [{url: "http://prefill-0.prefill:30000", bootstrap_port: 8998}]
  decode: [{url: "http://decode-0.decode:30000"}]
`)
	cfg := r.pdlbConfig(t)
	d := r.deployment
	pod := d.Spec.Template
	c := pod.Spec.Containers[0]

	if *d.Spec.Replicas != 2 || cfg.Bootstrap.Mode != "external" {
		t.Errorf("defaults: %d replicas, bootstrap.mode %q; want 2 replicas polling external registries", *d.Spec.Replicas, cfg.Bootstrap.Mode)
	}
	if got := containerPort(t, c, "http"); int(got) != cfg.Server.Port || cfg.Server.Host != "0.0.0.0" {
		t.Errorf("container port http %d, pdlb listens on %s:%d", got, cfg.Server.Host, cfg.Server.Port)
	}
	if got := containerPort(t, c, "admin"); int(got) != cfg.Admin.Port || cfg.Admin.Host != "0.0.0.0" {
		t.Errorf("container port admin %d, pdlb's admin API listens on %s:%d", got, cfg.Admin.Host, cfg.Admin.Port)
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/liveness", c.ReadinessProbe: "/readiness"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("probe for %s: %+v", path, probe)
		}
	}
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace <= cfg.Server.ShutdownGrace {
		t.Errorf("terminationGracePeriodSeconds %v is not above server.shutdown_grace %v: Kubernetes would kill a draining pod", grace, cfg.Server.ShutdownGrace)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("pod may run as root: %+v", sc)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container root filesystem is writable: %+v", sc)
	}
	if a := pod.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != fmt.Sprint(cfg.Server.Port) ||
		a["prometheus.io/path"] != "/metrics" || !cfg.Metrics.Enabled {
		t.Errorf("scrape annotations %v do not point at pdlb's /metrics (metrics.enabled %v)", a, cfg.Metrics.Enabled)
	}
	if v := pod.Spec.Volumes; len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != r.configMap.Name {
		t.Errorf("the config volume is not the chart's ConfigMap: %+v", v)
	}
	if m := c.VolumeMounts; len(m) != 1 || !strings.HasPrefix(c.Args[2], m[0].MountPath+"/") {
		t.Errorf("pdlb reads %s, the ConfigMap is mounted at %+v", c.Args[2], m)
	}

	podLabels := labels.Set(pod.Labels)
	if sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels); !sel.Matches(podLabels) {
		t.Errorf("the Deployment's selector %v misses its pods %v", sel, podLabels)
	}
	if len(r.services) != 2 {
		t.Fatalf("want the serving Service and the headless admin Service, got %d", len(r.services))
	}
	for _, s := range r.services {
		if sel := labels.SelectorFromSet(s.Spec.Selector); !sel.Matches(podLabels) {
			t.Errorf("Service %s selects %v, not the pods %v", s.Name, sel, podLabels)
		}
		for _, p := range s.Spec.Ports {
			containerPort(t, c, p.TargetPort.StrVal) // each target is a named port of the container
		}
	}
	if r.pdb == nil || r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget: %+v", r.pdb)
	} else if sel := labels.SelectorFromSet(r.pdb.Spec.Selector.MatchLabels); !sel.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget selects %v, not the pods %v", sel, podLabels)
	}
	if r.serviceAccount == nil || pod.Spec.ServiceAccountName != r.serviceAccount.Name {
		t.Errorf("the pods run as %q, the chart creates %+v", pod.Spec.ServiceAccountName, r.serviceAccount)
	}
	if r.role != nil || r.roleBinding != nil || r.clusterRole != nil || r.clusterRoleBinding != nil || cfg.Discovery.Kubernetes.Enabled {
		t.Errorf("discovery is off by default, yet the chart renders RBAC for it (or turns it on)")
	}
	if a := r.serviceAccount.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("without discovery the ServiceAccount's token is mounted (%v); pdlb calls no Kubernetes API", a)
	}
}

// TestChartValues: values the README documents reach pdlb.
func TestChartValues(t *testing.T) {
	r := render(t, `replicaCount: 1
shutdownGraceSeconds: 120
adminApiKeySecret: {name: pdlb-admin}
upstreamAuthSecret: {name: sglang-keys}
metrics: {scrapeAnnotations: false}
podDisruptionBudget: {enabled: false}
config:
  bootstrap: {mode: embedded, advertise_host: 10.0.0.7}
  server: {api_key: client-key, port: 9999}
  prefill: [{url: "http://prefill-0.prefill:30000", bootstrap_port: 8998}]
  decode: [{url: "http://decode-0.decode:30000"}]
`)
	cfg := r.pdlbConfig(t)
	pod := r.deployment.Spec.Template
	if cfg.Server.ShutdownGrace != 120*time.Second || *pod.Spec.TerminationGracePeriodSeconds <= 120 {
		t.Errorf("shutdownGraceSeconds 120: server.shutdown_grace %v, terminationGracePeriodSeconds %d", cfg.Server.ShutdownGrace, *pod.Spec.TerminationGracePeriodSeconds)
	}
	if cfg.Admin.APIKey != "from-a-secret" {
		t.Errorf("adminApiKeySecret does not set admin.api_key (env %+v)", pod.Spec.Containers[0].Env)
	}
	if cfg.UpstreamAuth.APIKey != "from-a-secret" || cfg.UpstreamAuth.AdminAPIKey != "from-a-secret" {
		t.Errorf("upstreamAuthSecret does not set upstream_auth (env %+v)", pod.Spec.Containers[0].Env)
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && ref.SecretKeyRef.Name == "sglang-keys" {
			if want := map[string]string{"PDLB_UPSTREAM_AUTH_API_KEY": "api-key", "PDLB_UPSTREAM_AUTH_ADMIN_API_KEY": "admin-api-key"}[e.Name]; ref.SecretKeyRef.Key != want ||
				ref.SecretKeyRef.Optional == nil || !*ref.SecretKeyRef.Optional {
				t.Errorf("%s from key %q (optional %v), want %q, optional", e.Name, ref.SecretKeyRef.Key, ref.SecretKeyRef.Optional, want)
			}
		}
	}
	if cfg.Server.APIKey != "client-key" || cfg.Bootstrap.AdvertiseHost != "10.0.0.7" {
		t.Errorf("the user's config keys were lost: %+v", cfg.Server)
	}
	if cfg.Server.Port != 8000 {
		t.Errorf("server.port %d: the chart owns it (service.port), or probes and Service would miss it", cfg.Server.Port)
	}
	if _, ok := pod.Annotations["prometheus.io/scrape"]; ok || r.pdb != nil {
		t.Errorf("scrape annotations or PodDisruptionBudget rendered although turned off")
	}
}

// TestCIBuildsThisHelm: .ci/run builds the helm the tests run, or its first
// build would count against the tests' time limit.
func TestCIBuildsThisHelm(t *testing.T) {
	ci, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ci), "go run "+helmModule+" version") {
		t.Errorf(".ci/run does not build %s", helmModule)
	}
}

// TestChartRefusesASplitRegistry: several replicas with the embedded
// registry would leave a decode asking a replica where its prefill never
// registered; the chart says so instead of rendering.
func TestChartRefusesASplitRegistry(t *testing.T) {
	_, err := helmTemplate(t, "replicaCount: 3\nconfig: {bootstrap: {mode: embedded}}\n") // checked before the engines
	if err == nil || !strings.Contains(err.Error(), "needs config.cluster.etcd.endpoints") {
		t.Fatalf("helm template with 3 replicas and the embedded registry: %v", err)
	}
	engines := `prefill: [{url: "http://p:30000"}], decode: [{url: "http://d:30000"}]`
	if _, err := helmTemplate(t, "replicaCount: 3\nconfig: {bootstrap: {mode: \"off\"}, "+engines+"}\n"); err != nil {
		t.Fatalf("3 replicas without a registry: %v", err)
	}
}

// TestChartRefusesNoEngines: replicas whose config lists no prefill or no
// decode would never be ready (a worker added through one replica's admin
// API reaches that replica only, behind the Service), so the chart says so
// at install time; with etcd the replicas share such workers, and the lists
// may be empty.
func TestChartRefusesNoEngines(t *testing.T) {
	_, err := helmTemplate(t, "config: {decode: [{url: \"http://d:30000\"}]}\n")
	if err == nil || !strings.Contains(err.Error(), "config.prefill and config.decode must each list at least one engine") {
		t.Fatalf("helm template without prefills: %v", err)
	}
	r := render(t, "replicaCount: 2\nconfig: {cluster: {etcd: {endpoints: [\"http://etcd-0.etcd:2379\"]}}}\n")
	if cfg := r.pdlbConfig(t); len(cfg.Prefill) != 0 || len(cfg.Decode) != 0 {
		t.Fatalf("engines from nowhere: %+v %+v", cfg.Prefill, cfg.Decode)
	}
}

// TestChartEngineKeysNeedAnAdminKey: the admin API listens on the pod
// network; with the engines' keys in pdlb, anyone reaching it could add a
// worker and be sent them, so the chart wants the admin API's key too.
func TestChartEngineKeysNeedAnAdminKey(t *testing.T) {
	_, err := helmTemplate(t, "upstreamAuthSecret: {name: sglang-keys}\nconfig: {prefill: [{url: \"http://p:1\"}], decode: [{url: \"http://d:1\"}]}\n")
	if err == nil || !strings.Contains(err.Error(), "upstreamAuthSecret needs adminApiKeySecret") {
		t.Fatalf("engine keys with an open admin API: %v", err)
	}
}

// TestChartDiscovery: discovery on renders a Role in the release's namespace
// that lets pdlb's ServiceAccount get, list and watch pods (and nothing
// else), mounts its token, and writes the selectors and namespace into the
// config pdlb loads; the engines may all come from discovery. With etcd
// endpoints several replicas may keep the embedded registry.
func TestChartDiscovery(t *testing.T) {
	r := render(t, `replicaCount: 3
discovery:
  enabled: true
  prefillSelector: app=sglang,role=prefill
  decodeSelector: app=sglang,role in (decode)
config:
  bootstrap: {mode: embedded}
  cluster: {etcd: {endpoints: ["http://etcd-0.etcd:2379"]}}
  discovery: {kubernetes: {http_port_name: serve}}
`)
	cfg := r.pdlbConfig(t)
	k := cfg.Discovery.Kubernetes
	if !k.Enabled || k.Namespace != "llm" || k.PrefillSelector != "app=sglang,role=prefill" || k.DecodeSelector != "app=sglang,role in (decode)" || k.HTTPPortName != "serve" {
		t.Errorf("pdlb's discovery.kubernetes: %+v", k)
	}
	if *r.deployment.Spec.Replicas != 3 || cfg.Bootstrap.Mode != "embedded" || len(cfg.Cluster.Etcd.Endpoints) != 1 {
		t.Errorf("%d replicas, bootstrap.mode %s, etcd %v; want 3 replicas sharing the embedded registry through etcd",
			*r.deployment.Spec.Replicas, cfg.Bootstrap.Mode, cfg.Cluster.Etcd.Endpoints)
	}
	if r.role == nil || r.roleBinding == nil || r.clusterRole != nil || r.clusterRoleBinding != nil {
		t.Fatalf("want a Role and a RoleBinding only: %+v %+v %+v %+v", r.role, r.roleBinding, r.clusterRole, r.clusterRoleBinding)
	}
	if r.role.Namespace != "llm" || r.roleBinding.Namespace != "llm" {
		t.Errorf("Role in %q, RoleBinding in %q; want the engines' namespace llm", r.role.Namespace, r.roleBinding.Namespace)
	}
	checkPodReadRules(t, r.role.Rules)
	checkBinding(t, r, r.roleBinding.RoleRef, r.roleBinding.Subjects, "Role", r.role.Name)
	if a := r.serviceAccount.AutomountServiceAccountToken; a == nil || !*a {
		t.Errorf("discovery needs the ServiceAccount's token mounted (in-cluster config), automount is %v", a)
	}
	// Each replica tells the decodes its own registry's address.
	if cfg.Bootstrap.AdvertiseHost != testPodIP {
		t.Errorf("bootstrap.advertise_host %q, want the pod's IP (status.podIP)", cfg.Bootstrap.AdvertiseHost)
	}
}

// TestChartDiscoveryAllNamespaces: namespace "*" watches every namespace,
// which a Role cannot grant: a ClusterRole and ClusterRoleBinding.
func TestChartDiscoveryAllNamespaces(t *testing.T) {
	r := render(t, `discovery: {enabled: true, namespace: "*", decodeSelector: app=sglang-decode}
config:
  prefill: [{url: "http://prefill-0.prefill:30000"}]
`)
	if k := r.pdlbConfig(t).Discovery.Kubernetes; k.Namespace != "*" || k.PrefillSelector != "" {
		t.Errorf("pdlb's discovery.kubernetes: %+v", k)
	}
	if r.clusterRole == nil || r.clusterRoleBinding == nil || r.role != nil || r.roleBinding != nil {
		t.Fatalf("want a ClusterRole and a ClusterRoleBinding only")
	}
	checkPodReadRules(t, r.clusterRole.Rules)
	checkBinding(t, r, r.clusterRoleBinding.RoleRef, r.clusterRoleBinding.Subjects, "ClusterRole", r.clusterRole.Name)
}

// checkPodReadRules: the rules grant get, list and watch on core pods, and
// nothing more.
func checkPodReadRules(t *testing.T, rules []rbacv1.PolicyRule) {
	t.Helper()
	if len(rules) != 1 {
		t.Fatalf("rules %+v, want one", rules)
	}
	r := rules[0]
	if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"pods"}) ||
		!slices.Equal(r.Verbs, []string{"get", "list", "watch"}) || len(r.ResourceNames) != 0 {
		t.Errorf("rule %+v, want get, list, watch on core pods", r)
	}
}

// checkBinding: the binding gives the role to the ServiceAccount the pods
// run as, in the release's namespace.
func checkBinding(t *testing.T, r rendered, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind, name string) {
	t.Helper()
	if ref.APIGroup != rbacv1.GroupName || ref.Kind != kind || ref.Name != name {
		t.Errorf("roleRef %+v, want %s %s", ref, kind, name)
	}
	sa := r.deployment.Spec.Template.Spec.ServiceAccountName
	if len(subjects) != 1 || subjects[0].Kind != rbacv1.ServiceAccountKind || subjects[0].Name != sa || subjects[0].Namespace != "llm" {
		t.Errorf("subjects %+v, want the pods' ServiceAccount %s in llm", subjects, sa)
	}
}

// TestChartRefusesDiscoveryWithoutSelector: discovery on with no selector
// would find nothing; the chart says so.
func TestChartRefusesDiscoveryWithoutSelector(t *testing.T) {
	_, err := helmTemplate(t, "discovery: {enabled: true}\nconfig: {prefill: [{url: \"http://p:30000\"}], decode: [{url: \"http://d:30000\"}]}\n")
	if err == nil || !strings.Contains(err.Error(), "discovery.enabled needs discovery.prefillSelector") {
		t.Fatalf("helm template with discovery and no selector: %v", err)
	}
	_, err = helmTemplate(t, "discovery: {enabled: true, prefillSelector: role=prefill}\n")
	if err == nil || !strings.Contains(err.Error(), "or discovery find them") {
		t.Fatalf("helm template with prefills discovered and no decode anywhere: %v", err)
	}
}
