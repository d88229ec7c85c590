package load

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestWatchOwnProcess(t *testing.T) {
	w := watchProc(os.Getpid(), 5*time.Millisecond)
	// Burn CPU until the kernel's tick-granular counters move (a tick is 10 ms at 100 Hz).
	x := 0
	for start := time.Now(); time.Since(start) < 80*time.Millisecond; {
		x++
	}
	u := w.end()
	if !u.ok || u.cpu <= 0 || u.peakRSS <= 0 || u.hwm < u.peakRSS/2 {
		t.Errorf("usage = %+v (spun %d times), want CPU and RSS > 0", u, x)
	}
	if hz := clockTicks(); hz <= 0 || hz > 10000 {
		t.Errorf("clock ticks = %d", hz)
	}
}

func TestRunReportsCPUPerRequest(t *testing.T) {
	url := serve(t, engine(0))
	rep, err := Run(context.Background(), Options{
		Targets: []string{url}, PIDs: []int{os.Getpid()}, Requests: 3000, Concurrency: 8, OutputLen: Dist{1, 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Targets[0].Median
	// The target server runs in this process, so its CPU is ours and cannot be zero.
	if r.CPUMicrosPerReq <= 0 || r.PeakRSSBytes <= 0 || r.CPUSeconds <= 0 {
		t.Errorf("cpu µs/req %.2f, peak RSS %d, cpu s %.3f; want all > 0", r.CPUMicrosPerReq, r.PeakRSSBytes, r.CPUSeconds)
	}
	if rep.Machine.NumCPU <= 0 {
		t.Errorf("machine: %+v", rep.Machine)
	}
}

func TestReadProcMissing(t *testing.T) {
	if _, err := readProc(1 << 30); err == nil {
		t.Error("reading a PID that cannot exist should fail")
	}
}
