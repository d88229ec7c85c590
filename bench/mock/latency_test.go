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
