package service

import (
	"testing"

	"pdlb/proxy/proxytest"
)

// TestMain fails the package when a test leaves a goroutine behind (a
// relay, a cut leg, a health checker, a registry poller, a drain).
func TestMain(m *testing.M) { proxytest.RunWithLeakCheck(m) }
