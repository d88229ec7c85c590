// Package discovery finds prefill and decode engines at runtime. Its one
// source today is Kubernetes: client-go informers on Pods, one per role,
// each listing and watching the pods of its label selector in one
// namespace (or all), through a REST client that knows the core/v1 types
// only (client-go's clientset would link every API group into pdlb). A pod that is Ready joins its role; one that is
// deleted, turns not Ready or loses its role's labels leaves. What joining
// and leaving do to the backend pool is the Sink's business (the Service
// adds a backend, and drains one as DELETE /workers does); nothing here is
// on the request path.
package discovery
