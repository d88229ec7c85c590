package discovery

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"pdlb/config"
)

// serviceAccountNamespace is where Kubernetes writes a pod's own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Connect builds a client for the API server (in-cluster, or cfg's
// kubeconfig) and says which namespace to watch: cfg's, else pdlb's own;
// "" means every namespace. Nothing is sent to the API server yet.
func Connect(cfg config.Kubernetes) (kubernetes.Interface, string, error) {
	var (
		rc  *rest.Config
		own func() (string, error)
		err error
	)
	if cfg.Kubeconfig != "" {
		kc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}, &clientcmd.ConfigOverrides{})
		if rc, err = kc.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("discovery.kubernetes.kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		own = func() (string, error) { ns, _, err := kc.Namespace(); return ns, err }
	} else {
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, "", fmt.Errorf("discovery.kubernetes: not in a pod (%w); set discovery.kubernetes.kubeconfig to run outside the cluster", err)
		}
		own = OwnNamespace
	}
	ns, err := Namespace(cfg.Namespace, own)
	if err != nil {
		return nil, "", err
	}
	rc.UserAgent = "pdlb"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("discovery.kubernetes: %w", err)
	}
	return client, ns, nil
}

// Namespace resolves discovery.kubernetes.namespace: "*" is every
// namespace (""), "" is pdlb's own as own tells it.
func Namespace(configured string, own func() (string, error)) (string, error) {
	switch configured {
	case "*":
		return "", nil
	case "":
		ns, err := own()
		if err == nil && ns == "" {
			err = errors.New("empty")
		}
		if err != nil {
			return "", fmt.Errorf("discovery.kubernetes.namespace is empty and pdlb's own namespace is unknown (%v); set it", err)
		}
		return ns, nil
	}
	return configured, nil
}

func readNamespace(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// OwnNamespace is the namespace of the pod pdlb runs in, from its
// service account.
func OwnNamespace() (string, error) { return readNamespace(serviceAccountNamespace) }
