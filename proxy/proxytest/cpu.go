package proxytest

import (
	"syscall"
	"testing"
	"time"
)

// ReportCPU adds "cpu-ns/op" to a benchmark: the CPU time (user and
// system) the whole process spent per op between now and the call of the
// function it returns. With client, pdlb and engines in one process it is
// what one request costs all three, on every core; ns/op is wall time,
// mostly loopback round trips and scheduling. Call it after the set-up,
// and the function after the loop.
func ReportCPU(b *testing.B) (stop func()) {
	start := cpuTime(b)
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
