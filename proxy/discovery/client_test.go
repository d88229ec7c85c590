package discovery

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pdlb/config"
)

// TestConnectKubeconfig: outside the cluster the kubeconfig's current
// context gives the server and, when namespace is empty, the namespace;
// "*" is every namespace; a missing file is named in the error.
func TestConnectKubeconfig(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: engines}}]
current-context: x
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for configured, want := range map[string]string{"": "engines", "llm": "llm", "*": ""} {
		cfg := config.Default().Discovery.Kubernetes
		cfg.Kubeconfig, cfg.Namespace = kc, configured
		client, ns, err := Connect(cfg)
		if err != nil || client == nil || ns != want {
			t.Errorf("namespace %q: watching %q (%v), want %q", configured, ns, err, want)
		}
	}
	cfg := config.Default().Discovery.Kubernetes
	cfg.Kubeconfig = filepath.Join(t.TempDir(), "absent")
	if _, _, err := Connect(cfg); err == nil || !strings.Contains(err.Error(), "discovery.kubernetes.kubeconfig "+cfg.Kubeconfig) {
		t.Errorf("a missing kubeconfig: %v", err)
	}
}

// TestNamespaceUnknown: an empty namespace outside a pod is an error that
// says what to set.
func TestNamespaceUnknown(t *testing.T) {
	_, err := Namespace("", func() (string, error) { return "", errors.New("no service account") })
	if err == nil || !strings.Contains(err.Error(), "discovery.kubernetes.namespace is empty") || !strings.Contains(err.Error(), "no service account") {
		t.Fatalf("Namespace: %v", err)
	}
}

// TestConnectOutsideCluster: without a kubeconfig and not in a pod, the
// error says which key runs pdlb outside the cluster.
func TestConnectOutsideCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, _, err := Connect(config.Default().Discovery.Kubernetes); err == nil || !strings.Contains(err.Error(), "set discovery.kubernetes.kubeconfig") {
		t.Fatalf("Connect outside a pod: %v", err)
	}
}
