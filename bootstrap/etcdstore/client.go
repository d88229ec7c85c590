package etcdstore

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"pdlb/config"
)

// Connect builds an etcd client from cluster.etcd. It does not wait for
// etcd: a replica starts (and serves its local copy) while etcd is down,
// and the client connects when it can.
func Connect(c config.Etcd) (*clientv3.Client, error) {
	cc := clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		Username:    c.Username,
		Password:    c.Password,
		// The client's own logging (zap) would be a second log format on
		// stderr; pdlb logs what a failure means where it happens.
		Logger: zap.NewNop(),
		// Keep-alive pings notice a dead member in seconds, not at the next
		// write's timeout.
		// (etcd refuses pings more often than every 5 s.)
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: c.DialTimeout,
		// gRPC's reconnect backoff grows to 2 minutes; capped at 2 s, a
		// replica takes writes again within seconds of etcd's return, for
		// one connection attempt per member every 2 s while it is down.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: c.DialTimeout,
		})},
	}
	tlsCfg, err := tlsConfig(c)
	if err != nil {
		return nil, err
	}
	cc.TLS = tlsCfg
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("cluster.etcd: %w", err)
	}
	return cli, nil
}

// tlsConfig is nil (plain connections) unless an endpoint is https or a CA
// or client certificate is given.
func tlsConfig(c config.Etcd) (*tls.Config, error) {
	https := len(c.Endpoints) > 0 && strings.HasPrefix(c.Endpoints[0], "https://")
	if !https && c.CAFile == "" && c.CertFile == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd.ca_file: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cluster.etcd.ca_file: %s holds no PEM certificate", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd.cert_file: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}
