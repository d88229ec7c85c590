package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: cut
// legs, drained prefill streams and client watchers must all end with
// their request.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, fasthttpBackground()...)
}

// fasthttpBackground ignores the goroutines fasthttp runs on its own and
// that outlive a clean shutdown by design: process-wide singletons (the
// server date ticker, the default dialer's DNS cache cleaner) and cleaners
// that notice a stop only after their current sleep (a server's worker
// pool: up to 10 s after Shutdown; a HostClient's idle-connection cleaner:
// up to MaxIdleConnDuration after its last connection closed).
func fasthttpBackground() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		// The client-watch hub: one goroutine for the life of the process.
		goleak.IgnoreAnyFunction("pdlb/proxy.(*watchHub).loop"),
	}
}
