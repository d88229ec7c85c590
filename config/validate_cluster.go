package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// checkCluster validates cluster.etcd.*; nothing is checked while
// endpoints is empty (one instance: the other keys are not read).
func (c *Config) checkCluster() *Error {
	e := c.Cluster.Etcd
	if len(e.Endpoints) == 0 {
		return nil
	}
	tls := 0
	for i, ep := range e.Endpoints {
		secure, err := parseEtcdEndpoint(ep)
		if err != nil {
			return errorf(fmt.Sprintf("cluster.etcd.endpoints[%d]", i), err.Error())
		}
		if secure {
			tls++
		}
	}
	if tls != 0 && tls != len(e.Endpoints) {
		return errorf("cluster.etcd.endpoints", "mixes http:// and https:// members; one connection uses TLS for all or none")
	}
	switch {
	case e.Prefix == "":
		return errorf("cluster.etcd.prefix", "must not be empty (it keeps pdlb's keys apart from anything else in etcd)")
	case e.DialTimeout <= 0:
		return errorf("cluster.etcd.dial_timeout", "must be positive")
	case e.RequestTimeout <= 0:
		return errorf("cluster.etcd.request_timeout", "must be positive")
	case e.LeaseTTL < 2*time.Second:
		// etcd grants whole seconds and the keep-alive renews at a third of
		// the TTL; below 2 s a replica under load would drop out of the vote.
		return errorf("cluster.etcd.lease_ttl", e.LeaseTTL.String()+" must be at least 2s")
	case e.Password != "" && e.Username == "":
		return errorf("cluster.etcd.password", "set without cluster.etcd.username")
	case (e.CertFile == "") != (e.KeyFile == ""):
		return errorf("cluster.etcd.cert_file", "cert_file and key_file go together (a client certificate and its key)")
	}
	return nil
}

// parseEtcdEndpoint accepts what etcd's client accepts: "host:port", or an
// http(s) URL without a path. It reports whether the endpoint uses TLS.
func parseEtcdEndpoint(ep string) (secure bool, err error) {
	if !strings.Contains(ep, "://") {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return false, fmt.Errorf("%q is not host:port or an http(s) URL", ep)
		}
		return false, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return false, fmt.Errorf("%q: %v", ep, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return false, fmt.Errorf("%q: scheme must be http or https", ep)
	}
	if u.Host == "" || u.Port() == "" {
		return false, fmt.Errorf("%q: needs host:port", ep)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return false, fmt.Errorf("%q: a member's URL has no path or query", ep)
	}
	return u.Scheme == "https", nil
}
