package discovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"pdlb/config"
)

// serviceAccountNamespace is where Kubernetes writes a pod's own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Pods is what discovery asks of the API server: list and watch the pods
// of a namespace ("" for all). Connect's talks to the API server; tests
// pass client-go's fake clientset's CoreV1().Pods behind it.
type Pods interface {
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// Connect builds a client for the API server (in-cluster, or cfg's
// kubeconfig) and says which namespace to watch: cfg's, else pdlb's own;
// "" means every namespace. Nothing is sent to the API server yet.
func Connect(cfg config.Kubernetes) (Pods, string, error) {
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
	client, err := newRESTPods(rc)
	if err != nil {
		return nil, "", fmt.Errorf("discovery.kubernetes: %w", err)
	}
	return client, ns, nil
}

// podScheme knows the core/v1 types alone. client-go's kubernetes.Clientset
// (and its typed core/v1 client, and the informer factory) would register
// every API group of its scheme, which links tens of MB into every build of
// pdlb for types it never reads.
var podScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	return s
}()

// restPods lists and watches pods as client-go's generated typed client
// does (protobuf preferred, JSON accepted), on a REST client of core/v1.
type restPods struct {
	client *rest.RESTClient
	params runtime.ParameterCodec
}

func newRESTPods(rc *rest.Config) (*restPods, error) {
	c := rest.CopyConfig(rc)
	gv := corev1.SchemeGroupVersion
	c.GroupVersion, c.APIPath = &gv, "/api"
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(podScheme, serializer.NewCodecFactory(podScheme)).WithoutConversion()
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &restPods{client: client, params: runtime.NewParameterCodec(podScheme)}, nil
}

func (p *restPods) request(namespace string, opts *metav1.ListOptions) *rest.Request {
	var timeout time.Duration
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	return p.client.Get().UseProtobufAsDefault().
		NamespaceIfScoped(namespace, namespace != "").
		Resource("pods").
		VersionedParams(opts, p.params).
		Timeout(timeout)
}

func (p *restPods) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	list := &corev1.PodList{}
	err := p.request(namespace, &opts).Do(ctx).Into(list)
	return list, err
}

func (p *restPods) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return p.request(namespace, &opts).Watch(ctx)
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
