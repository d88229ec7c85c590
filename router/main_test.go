package router

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
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
		if err := goleak.Find(fasthttpBackground()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fasthttpBackground ignores the goroutines fasthttp runs on its own and
// that outlive a clean shutdown by design: process-wide singletons (the
// server date ticker, the default dialer's DNS cache cleaner) and cleaners
// that notice a stop only after their current sleep (a server's worker
// pool: up to 10 s after Shutdown; a client's idle-connection cleaners: up
// to MaxIdleConnDuration after their last connection closed).
func fasthttpBackground() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		// The client-watch hub: one goroutine for the life of the process.
		goleak.IgnoreAnyFunction("pdlb/proxy.(*watchHub).loop"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
	}
}
