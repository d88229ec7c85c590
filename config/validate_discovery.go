package config

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// checkDiscovery validates discovery.kubernetes.*; nothing is checked
// while it is off (the other keys are not read).
func (c *Config) checkDiscovery() *Error {
	k := c.Discovery.Kubernetes
	if !k.Enabled {
		return nil
	}
	const key = "discovery.kubernetes."
	if k.PrefillSelector == "" && k.DecodeSelector == "" {
		return errorf(key+"prefill_selector", "discovery.kubernetes.enabled needs prefill_selector, decode_selector or both")
	}
	var parsed [2]string
	for i, sel := range []struct{ key, value string }{{"prefill_selector", k.PrefillSelector}, {"decode_selector", k.DecodeSelector}} {
		if sel.value == "" {
			continue
		}
		s, err := ParseSelector(sel.value)
		if err != nil {
			return errorf(key+sel.key, err.Error())
		}
		parsed[i] = s.String()
	}
	if parsed[0] != "" && parsed[0] == parsed[1] {
		return errorf(key+"decode_selector", fmt.Sprintf("%q selects the same pods as prefill_selector; a pod has one role", k.DecodeSelector))
	}
	if ns := k.Namespace; ns != "" && ns != "*" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return errorf(key+"namespace", fmt.Sprintf("%q is not a namespace name (or \"\" for pdlb's own, \"*\" for all): %s", ns, strings.Join(errs, "; ")))
		}
	}
	if k.HTTPPortName == "" && k.HTTPPortAnnotation == "" {
		return errorf(key+"http_port_name", "http_port_name and http_port_annotation are both empty: no way to find a pod's HTTP port")
	}
	if n := k.HTTPPortName; n != "" {
		if errs := validation.IsValidPortName(n); len(errs) > 0 {
			return errorf(key+"http_port_name", fmt.Sprintf("%q is not a container port name: %s", n, strings.Join(errs, "; ")))
		}
	}
	for _, a := range []struct{ key, value string }{{"http_port_annotation", k.HTTPPortAnnotation}, {"bootstrap_port_annotation", k.BootstrapPortAnnotation}} {
		if a.value == "" {
			continue
		}
		if errs := validation.IsQualifiedName(a.value); len(errs) > 0 {
			return errorf(key+a.key, fmt.Sprintf("%q is not an annotation key: %s", a.value, strings.Join(errs, "; ")))
		}
	}
	return nil
}

// ParseSelector parses a label selector as kubectl -l takes it; one that
// selects every pod (blank) is refused, as discovery would take any pod
// for an engine.
func ParseSelector(s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a label selector: %v", s, err)
	}
	if sel.Empty() {
		return nil, fmt.Errorf("%q selects every pod; name the labels of the engines (app=sglang,role=prefill)", s)
	}
	return sel, nil
}
