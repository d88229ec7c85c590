package load

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// procSample is one read of a process's CPU time and memory from /proc.
type procSample struct {
	cpu   time.Duration // utime + stime
	rss   int64         // VmRSS, bytes
	hwm   int64         // VmHWM (peak RSS over the process's life), bytes
	valid bool
}

// readProc reads /proc/PID/stat and /proc/PID/status.
func readProc(pid int) (procSample, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procSample{}, err
	}
	// The command name may hold spaces and parentheses; fields resume after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procSample{}, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(stat[i+1:])
	// After ')': state is field 3, so utime (14) and stime (15) are f[11] and f[12].
	if len(f) < 13 {
		return procSample{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return procSample{}, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	s := procSample{cpu: time.Duration(ut+st) * time.Second / time.Duration(clockTicks()), valid: true}

	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procSample{}, err
	}
	s.rss = statusKB(status, "VmRSS:")
	s.hwm = statusKB(status, "VmHWM:")
	return s, nil
}

// statusKB reads a "Key:   1234 kB" line of /proc/PID/status, in bytes.
func statusKB(status []byte, key string) int64 {
	i := bytes.Index(status, []byte(key))
	if i < 0 {
		return 0
	}
	line := status[i+len(key):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	f := bytes.Fields(line)
	if len(f) == 0 {
		return 0
	}
	kb, _ := strconv.ParseInt(string(f[0]), 10, 64)
	return kb << 10
}

// clockTicks is USER_HZ, the unit of utime/stime. Go has no sysconf without cgo, but
// the kernel hands the value to every process in its auxiliary vector (AT_CLKTCK).
var clockTicks = sync.OnceValue(func() int64 {
	const atClkTck = 17
	if auxv, err := os.ReadFile("/proc/self/auxv"); err == nil && strconv.IntSize == 64 {
		for i := 0; i+16 <= len(auxv); i += 16 {
			if binary.NativeEndian.Uint64(auxv[i:]) == atClkTck {
				if v := int64(binary.NativeEndian.Uint64(auxv[i+8:])); v > 0 {
					return v
				}
			}
		}
	}
	return 100
})

// procWatch samples a process while a round runs: CPU at both ends, RSS every interval.
type procWatch struct {
	pid     int
	first   procSample
	peakRSS int64
	stop    chan struct{}
	done    chan struct{}
}

func watchProc(pid int, every time.Duration) *procWatch {
	w := &procWatch{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	w.first, _ = readProc(pid)
	w.peakRSS = w.first.rss
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				if s, err := readProc(pid); err == nil {
					w.peakRSS = max(w.peakRSS, s.rss)
				}
			}
		}
	}()
	return w
}

// procUsage is what a watch measured over one round.
type procUsage struct {
	cpu     time.Duration
	peakRSS int64
	hwm     int64
	ok      bool
}

// end stops sampling and returns the CPU used since the start and the peak RSS seen.
func (w *procWatch) end() procUsage {
	close(w.stop)
	<-w.done
	last, err := readProc(w.pid)
	if err != nil || !w.first.valid {
		return procUsage{}
	}
	return procUsage{cpu: last.cpu - w.first.cpu, peakRSS: max(w.peakRSS, last.rss), hwm: last.hwm, ok: true}
}
