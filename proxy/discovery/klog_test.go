package discovery

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"k8s.io/klog/v2"

	"pdlb/proxy/proxytest"
)

// klog writes to the last discovery started that still runs: when the
// newer of two stops, the older gets the lines again; when both stopped,
// neither does.
func TestKlogFollowsTheRunningDiscoveries(t *testing.T) {
	a, b := &proxytest.SyncBuffer{}, &proxytest.SyncBuffer{}
	releaseA := routeKlog(zerolog.New(a))
	releaseB := routeKlog(zerolog.New(b))
	say := func(msg string) { klog.Warning(msg); klog.Flush() }
	say("one")
	releaseB()
	say("two")
	releaseA()
	releaseA() // twice: a no-op
	say("three")
	if got := string(a.Bytes()); strings.Contains(got, "one") || !strings.Contains(got, "two") || strings.Contains(got, "three") {
		t.Errorf("A's log: %s", got)
	}
	if got := string(b.Bytes()); !strings.Contains(got, "one") || strings.Contains(got, "two") || strings.Contains(got, "three") {
		t.Errorf("B's log: %s", got)
	}
}
