package proxytest

import "go.uber.org/goleak"

// IgnoredGoroutines is what every package's goroutine-leak check ignores
// (one list for the whole suite): the goroutines that outlive a clean
// shutdown by design: fasthttp's process-wide singletons (the server date ticker, the
// default dialer's DNS cache cleaner), its cleaners that notice a stop only
// after their current sleep (a server's worker pool: up to 10 s after
// Shutdown; a client's idle-connection cleaners: up to MaxIdleConnDuration
// after their last connection closed), and pdlb's client-watch hub (one
// goroutine for the life of the process).
func IgnoredGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("pdlb/proxy.(*watchHub).loop"),
	}
}
