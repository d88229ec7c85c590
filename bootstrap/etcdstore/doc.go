// Package etcdstore keeps what several pdlb replicas share in etcd: the
// embedded registry's namespaces, the workers added through the admin API,
// and which replicas are alive (their health verdicts for
// bootstrap.forget_after). Every replica serves from a local copy that a
// watch keeps current; only writes go to etcd.
//
// Keys, under cluster.etcd.prefix (P, default "/pdlb/"):
//
//	P registry/<bootstrap port>          one namespace: topology and ranks (JSON, bootstrap.NamespaceState)
//	P workers/<url>                      one backend added through the admin API (JSON: role, url, bootstrap_port)
//	P replicas/<replica id>              a live replica (bound to its lease)
//	P forget/<bootstrap port>/<replica>  that replica's health checks have failed the prefill for forget_after (lease-bound)
//
// Nothing here is on the request path.
package etcdstore
