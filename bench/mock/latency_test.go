package mock

import (
	"sync"
	"testing"
	"time"
)

func TestMaxBatchQueues(t *testing.T) {
	e, url := startEngine(t, Options{MaxBatch: 2, DecodePerToken: 10 * time.Millisecond, OutputLen: 4})
	var wg sync.WaitGroup
	statuses := make(chan int, 8)
	sawQueue := make(chan bool, 1)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _ := post(t, url+"/generate", `{"text":"a","bootstrap_room":1}`)
			statuses <- status
		}()
	}
	go func() {
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if e.Stats().Queued > 0 {
				sawQueue <- true
				return
			}
			time.Sleep(time.Millisecond)
		}
		sawQueue <- false
	}()
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Errorf("status %d", s)
		}
	}
	s := e.Stats()
	if s.MaxInFlight != 2 {
		t.Errorf("MaxInFlight %d, want exactly MaxBatch=2", s.MaxInFlight)
	}
	if !<-sawQueue {
		t.Error("never saw a queued request")
	}
	if s.InFlight != 0 || s.Queued != 0 {
		t.Errorf("after: InFlight %d Queued %d", s.InFlight, s.Queued)
	}
}

func TestPrefillTimeScalesWithPrompt(t *testing.T) {
	_, url := startEngine(t, Options{PrefillPerToken: 10 * time.Millisecond, OutputLen: 1})
	start := time.Now()
	post(t, url+"/generate", `{"input_ids":[1,2,3,4,5,6,7,8,9,10],"bootstrap_room":1}`)
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("10 prompt tokens × 10ms answered in %v", d)
	}
}

func TestFastIgnoresLatency(t *testing.T) {
	e := New(Options{Fast: true, PrefillPerToken: time.Second, DecodePerToken: time.Second, MaxBatch: 1}, nopLog())
	o := e.Options()
	if o.PrefillPerToken != 0 || o.DecodePerToken != 0 || o.TokenDelay != 0 || o.MaxBatch != 0 {
		t.Errorf("fast mode kept delays: %+v", o)
	}
}

func TestDecodeGapGrowsWithTheBatch(t *testing.T) {
	e := New(Options{DecodePerToken: 10 * time.Millisecond, DecodePerTokenPerBatch: time.Millisecond, TimeScale: 0.5}, nopLog())
	if got := e.decodeGap(); got != 5*time.Millisecond {
		t.Errorf("empty batch: %v, want 10ms × 0.5", got)
	}
	e.sched.inFlight.Store(8)
	if got := e.decodeGap(); got != 9*time.Millisecond {
		t.Errorf("8 decoding: %v, want (10ms + 8 × 1ms) × 0.5", got)
	}
	if got := e.tokenGap(); got != 9*time.Millisecond {
		t.Errorf("stream gap %v, want the decode model's", got)
	}
	plain := New(Options{TokenDelay: 4 * time.Millisecond, TimeScale: 0.25}, nopLog())
	if got := plain.tokenGap(); got != time.Millisecond {
		t.Errorf("TokenDelay gap %v, want 4ms × 0.25", got)
	}
}

func TestOccupancyIntegratesSlotsHeld(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	var s scheduler
	s.init(2, clock)
	tick := func() { now = now.Add(time.Second) }
	s.acquire(nil, nil, 10) // t=0: 1 held
	tick()
	s.acquire(nil, nil, 20) // t=1: 2 held
	if got := s.heldTokens.Load(); got != 30 {
		t.Errorf("held tokens %d", got)
	}
	tick()
	s.release(10) // t=2: 1 held
	tick()
	s.release(20) // t=3: none
	tick()
	o := s.snapshot() // t=4
	want := Occupancy{Window: 4 * time.Second, Busy: 3 * time.Second, Held: 4 * time.Second, PeakRunning: 2}
	if o != want {
		t.Errorf("occupancy %+v, want %+v", o, want)
	}
	s.reset()
	tick()
	if o := s.snapshot(); o.Window != time.Second || o.Busy != 0 || o.PeakRunning != 0 {
		t.Errorf("after reset %+v", o)
	}
}
