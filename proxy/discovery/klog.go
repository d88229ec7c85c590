package discovery

import (
	"sync"

	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// client-go writes its own log lines through klog, a process-wide logger
// that prints its own text format to stderr: one such line in a JSON log
// breaks whatever parses it. While discovery runs, klog writes through
// pdlb's logger instead (its component "client-go"). klog's logger is global,
// so the routing is counted: the last Kubernetes to stop hands klog back
// its default, and a test's logger is never written to after its test.
var klogRoute struct {
	sync.Mutex
	users int
}

// routeKlog sends klog's lines to log until release is called.
func routeKlog(log zerolog.Logger) (release func()) {
	klogRoute.Lock()
	defer klogRoute.Unlock()
	klogRoute.users++
	klog.SetLogger(zerologr.New(&log))
	var once sync.Once
	return func() {
		once.Do(func() {
			klogRoute.Lock()
			defer klogRoute.Unlock()
			if klogRoute.users--; klogRoute.users == 0 {
				klog.ClearLogger()
			}
		})
	}
}
