package service

import (
	"context"
	"maps"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"pdlb/config"
)

// traceFlushTimeout bounds the export of the spans still queued at
// shutdown: a collector that is down or hangs must not hold pdlb's exit.
const traceFlushTimeout = 5 * time.Second

// newTracerProvider builds the tracer provider tracing.* asks for, or
// returns nil when tracing is off. Spans go through a batch span processor
// (the SDK's: a bounded queue, 2048 spans unless OTEL_BSP_MAX_QUEUE_SIZE
// says otherwise, that drops spans when full rather than wait) to an
// OTLP/HTTP exporter on its own goroutine, so a slow or dead collector
// costs requests nothing. Precedence: a tracing.* key that is set wins
// over its OTEL_* variable; the exporter reads the others (timeout,
// compression, TLS).
func newTracerProvider(c config.Tracing, log zerolog.Logger) (*sdktrace.TracerProvider, error) {
	if !c.Enabled {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	if c.Endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(tracesURL(c.Endpoint)))
	}
	if len(c.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(maps.Clone(c.Headers)))
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(c.ServiceName)))
	if err != nil {
		return nil, err
	}
	tlog := log.With().Str("component", "tracing").Logger()
	exportLog.Store(&tlog)
	exportLogOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			if l := exportLog.Load(); l != nil {
				l.Warn().Err(err).Msg("trace export failed")
			}
		}))
	})
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
	), nil
}

// Failed exports are reported (once per batch) on the running service's
// log, not on stderr. otel's error handler is the process's, so it is set
// once and reads exportLog, which shutdownTracing clears: an export the
// SDK still retries after its provider's shutdown gave up waiting (a dead
// collector) must not write to a logger that is gone (in tests, a finished
// test's).
var (
	exportLog     atomic.Pointer[zerolog.Logger]
	exportLogOnce sync.Once
)

// tracesURL is where spans go for a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
// is read: its path + /v1/traces (validation made sure it parses).
func tracesURL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	return u.String()
}

// shutdownTracing exports what is queued, for at most flush, even when
// ctx (the drain's) has already ended.
func shutdownTracing(ctx context.Context, tp *sdktrace.TracerProvider, flush time.Duration, log zerolog.Logger) {
	if tp == nil {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flush)
	defer cancel()
	if err := tp.Shutdown(fctx); err != nil {
		log.Warn().Err(err).Msg("tracing: spans still queued at shutdown were dropped")
	}
	exportLog.Store(nil)
}

// sameTracing compares two tracing configs (a map makes them incomparable with ==).
func sameTracing(a, b config.Tracing) bool {
	return a.Enabled == b.Enabled && a.Endpoint == b.Endpoint && a.SampleRatio == b.SampleRatio &&
		a.ServiceName == b.ServiceName && maps.Equal(a.Headers, b.Headers)
}
