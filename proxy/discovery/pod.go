package discovery

import (
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"pdlb/proxy"
)

// Target is an engine one pod runs, as it joins the pool.
type Target struct {
	// Pod is "namespace/name".
	Pod  string
	Role proxy.Role
	// URL is http://<pod IP>:<HTTP port>.
	URL string
	// BootstrapPort is a prefill's KV bootstrap port; nil: JSON null.
	BootstrapPort *int
}

func (t *Target) same(o *Target) bool {
	if t == nil || o == nil {
		return t == o
	}
	if (t.BootstrapPort == nil) != (o.BootstrapPort == nil) || t.BootstrapPort != nil && *t.BootstrapPort != *o.BootstrapPort {
		return false
	}
	return t.Pod == o.Pod && t.Role == o.Role && t.URL == o.URL
}

// verdict is what one event says of a pod for one role: the engine it
// runs, or why it runs none (warn: a problem the operator must fix, said
// once, rather than a pod merely starting or stopping).
type verdict struct {
	target *Target
	why    string
	warn   bool
}

// ports says where a pod's engine listens: the annotations and the
// container port name of discovery.kubernetes.
type ports struct {
	httpName, httpAnnotation, bootstrapAnnotation string
}

// read judges a pod that matches role's selector.
func (p ports) read(role proxy.Role, pod *corev1.Pod) verdict {
	switch {
	case pod.DeletionTimestamp != nil:
		return verdict{why: "terminating"}
	case !ready(pod):
		return verdict{why: "not ready"}
	case pod.Status.PodIP == "":
		return verdict{why: "no pod IP"}
	}
	port, err := p.httpPort(pod)
	if err != nil {
		return verdict{why: err.Error(), warn: true}
	}
	t := &Target{Pod: pod.Namespace + "/" + pod.Name, Role: role, URL: "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))}
	if role == proxy.Prefill && p.bootstrapAnnotation != "" {
		if v, ok := pod.Annotations[p.bootstrapAnnotation]; ok {
			n, err := parsePort(v)
			if err != nil {
				return verdict{why: fmt.Sprintf("annotation %s: %v", p.bootstrapAnnotation, err), warn: true}
			}
			t.BootstrapPort = &n
		}
	}
	return verdict{target: t}
}

// httpPort is the annotation's port if the pod has it, else the named
// container port's.
func (p ports) httpPort(pod *corev1.Pod) (int, error) {
	if p.httpAnnotation != "" {
		if v, ok := pod.Annotations[p.httpAnnotation]; ok {
			n, err := parsePort(v)
			if err != nil {
				return 0, fmt.Errorf("annotation %s: %v", p.httpAnnotation, err)
			}
			return n, nil
		}
	}
	if p.httpName != "" {
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == p.httpName {
					if cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
						return 0, fmt.Errorf("container port %s: %d is not a port", p.httpName, cp.ContainerPort)
					}
					return int(cp.ContainerPort), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no HTTP port: no container port named %q and no annotation %q", p.httpName, p.httpAnnotation)
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return n, nil
}

// ready is the pod's Ready condition: its containers run and pass their
// readiness probes (for SGLang, its /health answers).
func ready(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
