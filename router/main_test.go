package router

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"

	"pdlb/proxy/proxytest"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// Service is shut down by its test, so a goroutine that survives it (a
// relay, a cut leg, a health checker, a registry poller) is a leak in pdlb.
func TestMain(m *testing.M) {
	code := m.Run()
	// The tests' net/http client keeps idle keep-alive connections (and
	// their goroutines); they are the test's, not pdlb's.
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(proxytest.IgnoredGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
