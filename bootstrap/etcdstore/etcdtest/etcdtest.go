// Package etcdtest runs a real etcd member in the test process (etcd's own
// embed package), on loopback with free ports and its data in a test's
// temporary folder, for the tests of everything pdlb keeps in etcd. Only
// tests import it, so the pdlb binary does not link the etcd server.
package etcdtest

import (
	"net"
	"net/url"
	"pdlb/proxy/proxytest"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is one etcd member; Stop and Start it again to test an outage (it
// comes back on the same ports with the same data).
type Etcd struct {
	t      testing.TB
	dir    string
	host   string
	served bool // it has served once: a restart keeps its ports
	client url.URL
	peer   url.URL
	e      *embed.Etcd
	closed chan struct{} // closed when the last Stop's Close returned
}

// Start runs a one-member etcd on host (a loopback address) and stops it
// when the test ends.
func Start(t testing.TB, host string) *Etcd {
	t.Helper()
	e := &Etcd{t: t, dir: t.TempDir(), host: host}
	e.pickPorts()
	e.Start()
	t.Cleanup(func() { e.Stop(); e.Wait() })
	return e
}

// Endpoint is the client URL.
func (e *Etcd) Endpoint() string { return e.client.String() }

// Start (re)starts the member; it returns once it serves.
func (e *Etcd) Start() {
	e.t.Helper()
	if e.e != nil {
		return
	}
	if e.closed != nil {
		<-e.closed
	}
	cfg := embed.NewConfig()
	cfg.Name = "pdlb-test"
	cfg.Dir = e.dir
	e.setURLs(cfg)
	// Its closing words ("server closed") are not the test's failures.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// A test's etcd serves a handful of keys; a small backend keeps its
	// start quick and its memory small.
	cfg.QuotaBackendBytes = 64 << 20
	var err error
	for attempt := 0; ; attempt++ {
		// A restart may find its ports in TIME_WAIT for a moment; a first
		// start whose ports another test took since they were found free
		// takes others.
		if e.e, err = embed.StartEtcd(cfg); err == nil || attempt == 20 {
			break
		}
		if !e.served {
			e.pickPorts()
			e.setURLs(cfg)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatalf("etcd: %v", err)
	}
	select {
	case <-e.e.Server.ReadyNotify():
		e.served = true
	case err := <-e.e.Err():
		e.t.Fatalf("etcd: %v", err)
	case <-time.After(30 * time.Second):
		e.e.Close()
		e.t.Fatal("etcd: not ready within 30s")
	}
}

// Stop closes the member (a no-op when stopped). It returns once the
// client port refuses connections; etcd's graceful close of the streams
// still open (watches) goes on in the background for up to its request
// timeout (7 s), and Start waits for it.
func (e *Etcd) Stop() {
	if e.e == nil {
		return
	}
	old, closed := e.e, make(chan struct{})
	e.e, e.closed = nil, closed
	go func() { defer close(closed); old.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", e.client.Host, time.Second)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	<-closed
}

// Wait waits for the background close of the last Stop.
func (e *Etcd) Wait() {
	if e.closed != nil {
		<-e.closed
	}
}

func (e *Etcd) setURLs(cfg *embed.Config) {
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{e.client}, []url.URL{e.client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{e.peer}, []url.URL{e.peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
}

// pickPorts chooses the client and peer ports (below the kernel's
// ephemeral range, so that no other test's ":0" takes them between a Stop
// and a Start).
func (e *Etcd) pickPorts() {
	ports := proxytest.FreePorts(e.t, 2, e.host)
	e.client = url.URL{Scheme: "http", Host: net.JoinHostPort(e.host, strconv.Itoa(ports[0]))}
	e.peer = url.URL{Scheme: "http", Host: net.JoinHostPort(e.host, strconv.Itoa(ports[1]))}
}
