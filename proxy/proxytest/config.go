package proxytest

import (
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
)

// Config is the configuration tests start pdlb with: loopback, timeouts
// short enough that a broken cancellation fails a test in seconds, no
// retries, no registry, metrics on. Tests change what they exercise.
func Config() config.Config {
	c := config.Config{}
	c.Server = config.Server{Host: "127.0.0.1", Port: 0, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second, MaxHeaderBytes: 8192}
	c.Timeouts = config.Timeouts{Connect: time.Second, PrefillFirstByte: 5 * time.Second, DecodeFirstByte: 5 * time.Second, DecodeIdle: 5 * time.Second, Request: 10 * time.Second}
	c.Limits = config.Limits{MaxBodyBytes: 1 << 20, MaxBatchSize: config.Default().Limits.MaxBatchSize}
	c.Retry = config.Retry{MaxAttempts: 1, Initial: time.Millisecond, Max: 10 * time.Millisecond}
	c.Bootstrap.Mode = "off"
	c.Metrics.Enabled = true
	return c
}

// Log is a test's logger: the test's output under -v, else nowhere.
func Log(t testing.TB) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t))
	}
	return zerolog.New(io.Discard)
}
