package mock

import (
	"strings"
	"testing"
	"time"
)

// pdPair serves a prefill and a decode that share a KVTransfers table.
func pdPair(t *testing.T, prefill, decode Options) (p, d *Engine, purl, durl string, k *KVTransfers) {
	t.Helper()
	k = NewKVTransfers()
	prefill.Role, prefill.KVTransfers = RolePrefill, k
	decode.Role, decode.KVTransfers = RoleDecode, k
	p, purl = startEngine(t, prefill)
	d, durl = startEngine(t, decode)
	return p, d, purl, durl, k
}

func TestDecodeWaitsForItsRoomsPrefill(t *testing.T) {
	p, d, purl, durl, k := pdPair(t, Options{KVCacheTokens: 1024, BlockSize: 4}, Options{OutputLen: 2})
	prompt := `"text":"` + words(0, 9) + `"`
	// Warm the prefill's cache with the prompt.
	post(t, purl+"/generate", `{`+prompt+`,"bootstrap_room":100}`)

	type answer struct {
		status int
		body   []byte
	}
	got := make(chan answer, 1)
	go func() {
		status, b := post(t, durl+"/generate", `{`+prompt+`,"bootstrap_room":7}`)
		got <- answer{status, b}
	}()
	eventually(t, 2*time.Second, "the decode waiting for its KV", func() bool { return d.Stats().AwaitingKV == 1 })
	// Its load counts it as waiting, with its 9 prompt and 2 output tokens.
	_, lb, _ := do(t, "GET", durl+"/get_load", "")
	if l := path(decode(t, lb), 0); path(l, "num_waiting_reqs") != 1.0 || path(l, "num_tokens") != 11.0 || path(l, "num_pending_tokens") != 11.0 {
		t.Errorf("/get_load while waiting for the KV: %s", lb)
	}
	select {
	case a := <-got:
		t.Fatalf("the decode answered before its prefill ran: %d %s", a.status, a.body)
	case <-time.After(50 * time.Millisecond):
	}
	post(t, purl+"/generate", `{`+prompt+`,"bootstrap_room":7}`)
	a := <-got
	if a.status != 200 {
		t.Fatalf("decode %d %s", a.status, a.body)
	}
	// The decode reports what its prefill found cached: two blocks of four.
	if c := path(decode(t, a.body), "meta_info", "cached_tokens"); c != 8.0 {
		t.Errorf("decode cached_tokens %v, want the prefill's 8", c)
	}
	if s := d.Stats(); s.InputTokens != 9 || s.CachedTokens != 8 || s.AwaitingKV != 0 {
		t.Errorf("decode stats: input %d cached %d awaiting %d", s.InputTokens, s.CachedTokens, s.AwaitingKV)
	}
	// The decode's room was claimed; the warm-up's (100) was never asked for.
	if n := k.Pending(); n != 1 {
		t.Errorf("%d rooms pending, want 1 (the warm-up's)", n)
	}
	_ = p
}

func TestDecodeWaitsForEveryBatchItem(t *testing.T) {
	_, _, purl, durl, _ := pdPair(t, Options{KVCacheTokens: 1024, BlockSize: 2}, Options{OutputLen: 1})
	post(t, purl+"/generate", `{"text":"a b","bootstrap_room":1}`)
	body := `{"text":["a b c","x y"],"bootstrap_room":[10,11]}`
	done := make(chan []byte, 1)
	go func() { _, b := post(t, durl+"/generate", body); done <- b }()
	post(t, purl+"/generate", body)
	items, _ := decode(t, <-done).([]any)
	if len(items) != 2 || path(items[0], "meta_info", "cached_tokens") != 2.0 || path(items[1], "meta_info", "cached_tokens") != 0.0 {
		t.Errorf("batch items %v; want cached_tokens 2 and 0", items)
	}
}

func TestDecodeFailsWhenItsPrefillFails(t *testing.T) {
	_, _, purl, durl, _ := pdPair(t, Options{ErrorRate: 1}, Options{})
	done := make(chan []byte, 1)
	go func() {
		status, b := post(t, durl+"/generate", `{"text":"a","bootstrap_room":3}`)
		if status != 500 {
			t.Errorf("decode status %d, want 500", status)
		}
		done <- b
	}()
	if status, _ := post(t, purl+"/generate", `{"text":"a","bootstrap_room":3}`); status != 500 {
		t.Errorf("prefill status %d, want the injected 500", status)
	}
	select {
	case b := <-done:
		if msg, _ := path(decode(t, b), "error", "message").(string); !strings.Contains(msg, "KV transfer of bootstrap_room 3 failed") {
			t.Errorf("decode error %q", msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the decode still waits for a prefill that failed")
	}
}

func TestDecodeGivesUpOnItsKV(t *testing.T) {
	_, d, _, durl, k := pdPair(t, Options{}, Options{KVWaitTimeout: time.Second, TimeScale: 0.05})
	status, b := post(t, durl+"/generate", `{"text":"a","bootstrap_room":3}`)
	if msg, _ := path(decode(t, b), "error", "message").(string); status != 500 || !strings.Contains(msg, "timed out") {
		t.Errorf("decode without a prefill: %d %s", status, b)
	}
	// An abort ends the wait too.
	done := make(chan int, 1)
	go func() {
		status, _ := post(t, durl+"/generate", `{"text":"a","rid":"r9","bootstrap_room":4}`)
		done <- status
	}()
	eventually(t, 2*time.Second, "the decode waiting", func() bool { return d.Stats().AwaitingKV == 1 })
	post(t, durl+"/abort_request", `{"rid":"r9"}`)
	if status := <-done; status != 503 {
		t.Errorf("aborted wait answered %d, want 503", status)
	}
	if n := k.Pending(); n != 0 {
		t.Errorf("%d rooms left behind by decodes that gave up", n)
	}
}

func TestKVTransfersForgetUnclaimedRooms(t *testing.T) {
	now := time.Unix(1000, 0)
	k := NewKVTransfers()
	k.now = func() time.Time { return now }
	k.complete(1, 5)
	now = now.Add(kvTransferKeep / 2)
	k.complete(2, 6)
	if k.Pending() != 2 {
		t.Fatalf("pending %d", k.Pending())
	}
	now = now.Add(kvTransferKeep/2 + time.Second)
	k.complete(3, 7) // recording forgets room 1, kept too long
	if k.Pending() != 2 {
		t.Errorf("pending %d after room 1 expired, want 2", k.Pending())
	}
	never := make(chan time.Time)
	if c, err := k.await(2, never, nil, nil); c != 6 || err != nil {
		t.Errorf("room 2: %d %v", c, err)
	}
	k.Reset()
	if k.Pending() != 0 {
		t.Errorf("pending %d after Reset", k.Pending())
	}
}
