package mock

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLoadRoutesCountQueuedPrefills(t *testing.T) {
	// 1000 tokens × 1ms × 0.2 = 200ms per prefill, one slot: the second and
	// third wait.
	e, url := startEngine(t, Options{Role: RolePrefill, PrefillPerToken: time.Millisecond, TimeScale: 0.2, KVCacheTokens: 4096})
	ids := strings.TrimSuffix(strings.Repeat("5,", 1000), ",")
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < 3; i++ {
		wg.Go(func() { post(t, url+"/generate", fmt.Sprintf(`{"input_ids":[%s],"bootstrap_room":%d}`, ids, i)) })
	}
	eventually(t, 2*time.Second, "two prefills queued", func() bool { return e.Stats().PrefillSlots.Queued == 2 })
	_, b, _ := do(t, "GET", url+"/v1/loads", "")
	v := decode(t, b)
	l := path(v, "loads", 0)
	for k, want := range map[string]float64{
		"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 2, "num_total_reqs": 3,
		"num_used_tokens": 1000, "num_total_tokens": 3000, "max_total_num_tokens": 4096,
	} {
		if got := path(l, k); got != want {
			t.Errorf("/v1/loads loads[0].%s = %v, want %v", k, got, want)
		}
	}
	if path(v, "dp_rank_count") != 1.0 || path(v, "aggregate", "total_reqs") != 3.0 || path(v, "aggregate", "total_tokens") != 3000.0 {
		t.Errorf("/v1/loads: %s", b)
	}
	if _, ok := path(v, "timestamp").(string); !ok {
		t.Errorf("timestamp not an ISO string: %s", b)
	}
	_, b, _ = do(t, "GET", url+"/get_load", "")
	g := path(decode(t, b), 0)
	for k, want := range map[string]float64{"dp_rank": 0, "num_reqs": 3, "num_waiting_reqs": 2, "num_tokens": 3000, "num_pending_tokens": 2000} {
		if got := path(g, k); got != want {
			t.Errorf("/get_load [0].%s = %v, want %v", k, got, want)
		}
	}
	if status, _, _ := do(t, "POST", url+"/get_load", ""); status != 405 {
		t.Errorf("POST /get_load: %d", status)
	}
}
