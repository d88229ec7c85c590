package proxy

import (
	"testing"

	"go.uber.org/goleak"

	"pdlb/proxy/proxytest"
)

// TestMain fails the package when a test leaves a goroutine behind: cut
// legs, drained prefill streams and client watchers must all end with
// their request.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, proxytest.IgnoredGoroutines()...)
}
