package discovery

import (
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// client-go writes its own log lines through klog, a process-wide logger
// that prints its own text format to stderr: one such line in a JSON log
// breaks whatever parses it. klog's logger may be set only before any
// goroutine logs (klog.SetLogger is not safe for concurrent use), so it is
// set once, here, to a sink that forwards each line to the logger of the
// discovery running now (zerologr renders it as pdlb's other lines), or,
// while none runs, to stderr as JSON.
func init() { klog.SetLogger(logr.New(forwardSink{})) }

// klogRoute is where klog's lines go: the logger of the last discovery
// started that is still running (running holds them in start order), so a
// stopped one's logger (a finished test's) is never written to.
var klogRoute struct {
	sync.Mutex
	running []*zerolog.Logger
	target  atomic.Pointer[zerolog.Logger]
}

var klogFallback = zerolog.New(os.Stderr).With().Timestamp().Str("component", "client-go").Logger()

// routeKlog sends klog's lines to log until release is called.
func routeKlog(log zerolog.Logger) (release func()) {
	klogRoute.Lock()
	defer klogRoute.Unlock()
	mine := &log
	klogRoute.running = append(klogRoute.running, mine)
	klogRoute.target.Store(mine)
	var once sync.Once
	return func() {
		once.Do(func() {
			klogRoute.Lock()
			defer klogRoute.Unlock()
			klogRoute.running = slices.DeleteFunc(klogRoute.running, func(l *zerolog.Logger) bool { return l == mine })
			var next *zerolog.Logger
			if n := len(klogRoute.running); n > 0 {
				next = klogRoute.running[n-1]
			}
			klogRoute.target.Store(next)
		})
	}
}

// forwardSink is klog's logr sink: it keeps the names and values klog
// adds and renders each line with zerologr on the target of the moment.
// Lines are rare (warnings, handled failures): building the zerologr
// logger per line costs nothing that matters.
type forwardSink struct {
	names  []string
	values []any
}

func (s forwardSink) logger() logr.Logger {
	target := klogRoute.target.Load()
	if target == nil {
		target = &klogFallback
	}
	l := zerologr.New(target)
	for _, n := range s.names {
		l = l.WithName(n)
	}
	if len(s.values) > 0 {
		l = l.WithValues(s.values...)
	}
	return l
}

func (forwardSink) Init(logr.RuntimeInfo) {}

func (s forwardSink) Enabled(level int) bool { return s.logger().GetSink().Enabled(level) }

func (s forwardSink) Info(level int, msg string, kv ...any) {
	s.logger().GetSink().Info(level, msg, kv...)
}

func (s forwardSink) Error(err error, msg string, kv ...any) {
	s.logger().GetSink().Error(err, msg, kv...)
}

func (s forwardSink) WithValues(kv ...any) logr.LogSink {
	s.values = append(append([]any(nil), s.values...), kv...)
	return s
}

func (s forwardSink) WithName(name string) logr.LogSink {
	s.names = append(append([]string(nil), s.names...), name)
	return s
}
