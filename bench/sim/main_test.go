package sim

import (
	"testing"

	"pdlb/proxy/proxytest"
)

// TestMain fails the package when a test leaves a goroutine behind (a
// cluster that does not stop cleanly).
func TestMain(m *testing.M) { proxytest.RunWithLeakCheck(m) }
