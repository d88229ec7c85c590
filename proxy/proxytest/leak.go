package proxytest

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// IgnoredGoroutines is what every package's goroutine-leak check ignores
// (one list for the whole suite): the goroutines that outlive a clean
// shutdown by design: fasthttp's process-wide singletons (the server date ticker, the
// default dialer's DNS cache cleaner), its cleaners that notice a stop only
// after their current sleep (a server's worker pool: up to 10 s after
// Shutdown; a client's idle-connection cleaners: up to MaxIdleConnDuration
// after their last connection closed), pdlb's client-watch hub (one
// goroutine for the life of the process), and the OpenTelemetry SDK's batch
// span processor, whose export to a dead or hanging collector runs on after
// its provider's Shutdown stopped waiting for it, until the exporter's own
// timeout (10 s; service TestTracingDeadCollector).
func IgnoredGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("pdlb/proxy.(*watchHub).loop"),
		goleak.IgnoreAnyFunction("go.opentelemetry.io/otel/sdk/trace.(*batchSpanProcessor).processQueue"),
		goleak.IgnoreAnyFunction("go.opentelemetry.io/otel/sdk/trace.(*batchSpanProcessor).drainQueue"),
		goleak.IgnoreAnyFunction("go.opentelemetry.io/otel/sdk/trace.(*batchSpanProcessor).Shutdown.func1.1"),
		goleak.IgnoreAnyFunction("go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp.(*client).contextWithStop.func1"),
	}
}

// RunWithLeakCheck is a package's TestMain: it runs the tests and then
// fails the package when one left a goroutine behind (every test shuts down
// what it started, so a survivor is a leak in pdlb). The net/http default
// client's idle keep-alive connections are the tests' own and are closed
// first.
func RunWithLeakCheck(m *testing.M) {
	code := m.Run()
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(IgnoredGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
