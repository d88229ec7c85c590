package router

import (
	"testing"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// BenchmarkRequestAborts runs a whole non-streamed /generate that completes
// normally through the Router's handler against loopback engines, with
// aborts off (no rid written), on with pdlb's own rid, and on with the
// client's: what the rid costs a request that never needs an abort.
// allocs/op counts the whole process (pdlb and the in-process engines).
//
//	go test ./router -run '^$' -bench RequestAborts -benchmem -count 5
func BenchmarkRequestAborts(b *testing.B) {
	p, d := benchEngines(b)
	const body = `{"text":"The quick brown fox jumps over the lazy dog","sampling_params":{"max_new_tokens":16}`
	for _, tc := range []struct {
		name, body string
		on         bool
	}{
		{"off", body + `}`, false},
		{"own-rid", body + `}`, true},
		{"client-rid", body + `,"rid":"client-request-0001"}`, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := startLBFull(b, []*proxytest.Engine{p}, []*proxytest.Engine{d}, Options{Log: zerolog.Nop()}, func(c *config.Config) {
				c.Abort = config.Abort{Enabled: tc.on, Timeout: config.Default().Abort.Timeout, MaxInFlight: 256}
			})
			benchGenerate(b, l, tc.body)
		})
	}
}
