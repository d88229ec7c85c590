package policy

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"pdlb/config"
	"pdlb/proxy"
)

// sessionPolicy builds a consistent_hashing policy with the default load factor:
// the rendezvous tests drive it by Request.Key.
func sessionPolicy(t *testing.T) *ConsistentHashing {
	t.Helper()
	p, err := newConsistentHashing(proxy.Decode, config.Default().Policy.ConsistentHashing)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sessionKey(i int) Request { return Request{Key: "session-" + strconv.Itoa(i)} }

// keyOrder lists cands in req's key order: its home first, then where it goes
// when the ones before are unavailable.
func keyOrder(t *testing.T, p Policy, req Request, cands []*proxy.Backend) []*proxy.Backend {
	t.Helper()
	var out []*proxy.Backend
	for range cands {
		b, why := p.Pick(req, cands, func(b *proxy.Backend) bool { return !listed(out, b) })
		if why.Value != float64(len(out)) {
			t.Fatalf("the backend after %d unavailable ones has rank %v", len(out), why.Value)
		}
		out = append(out, b)
	}
	return out
}

func listed(list []*proxy.Backend, b *proxy.Backend) bool {
	for _, x := range list {
		if x == b {
			return true
		}
	}
	return false
}

func TestRendezvousSameKeySameBackend(t *testing.T) {
	bs := backends(t, 8)
	p := sessionPolicy(t)
	for i := range 100 {
		home, why := p.Pick(sessionKey(i), bs, all)
		if why != (Reason{"decode_hash_rank", 0}) {
			t.Fatalf("key %d: reason %v, want rank 0 (its home)", i, why)
		}
		for range 3 {
			if b, _ := p.Pick(sessionKey(i), bs, all); b != home {
				t.Fatalf("key %d went to %s, then to %s", i, home.URL, b.URL)
			}
		}
	}
}

// TestRendezvousReplicasAgree: two pdlb replicas whose configs spell the
// same engines differently, and list them in another order, send every key
// to the same engine (they hash the normalised URL, Backend.Key).
func TestRendezvousReplicasAgree(t *testing.T) {
	spell := [][2]string{
		{"http://Engine-1:30000", "http://engine-1:30000/"},
		{"http://engine-2", "http://engine-2:80"},
		{"http://10.0.0.3:30000/", "http://10.0.0.3:30000"},
		{"http://[::1]:30000", "http://[::1]:30000/"},
		{"http://ENGINE-5:30000", "http://engine-5:30000"},
	}
	var a, b []*proxy.Backend
	for _, s := range spell {
		a = append(a, backendAt(t, s[0]))
		b = append(b, backendAt(t, s[1]))
	}
	rand.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
	p, q := sessionPolicy(t), sessionPolicy(t)
	for i := range 1000 {
		x, _ := p.Pick(sessionKey(i), a, all)
		y, _ := q.Pick(sessionKey(i), b, all)
		if x.Key() != y.Key() {
			t.Fatalf("key %d: one replica picked %s, the other %s", i, x.URL, y.URL)
		}
	}
}

func backendAt(t *testing.T, url string) *proxy.Backend {
	t.Helper()
	b, err := proxy.NewBackend(url, proxy.Decode, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRendezvousSpreadsKeysEvenly(t *testing.T) {
	bs := backends(t, 8)
	p := sessionPolicy(t)
	homes := map[*proxy.Backend]int{}
	const keys = 16000
	for i := range keys {
		b, _ := p.Pick(sessionKey(i), bs, all)
		homes[b]++
	}
	// 2,000 keys each expected; the binomial spread is about 42, so
	// 1,750–2,250 fails only when the hash favours some backends.
	for i, b := range bs {
		if n := homes[b]; n < 1750 || n > 2250 {
			t.Errorf("backend %d is home to %d of %d keys, want about %d", i, n, keys, keys/len(bs))
		}
	}
}

// TestRendezvousMovesFewKeys: a backend that joins takes about 1/n of the
// keys, each from its old home, and one that leaves gives away only its own.
func TestRendezvousMovesFewKeys(t *testing.T) {
	bs := backends(t, 9)
	p := sessionPolicy(t)
	const keys = 18000
	joined, left := 0, 0
	for i := range keys {
		before, _ := p.Pick(sessionKey(i), bs[:8], all)
		after, _ := p.Pick(sessionKey(i), bs, all)
		if after != before {
			joined++
			if after != bs[8] {
				t.Fatalf("key %d moved from %s to %s, not to the backend that joined", i, before.URL, after.URL)
			}
		}
		without, _ := p.Pick(sessionKey(i), bs[1:8], all)
		if without != before {
			left++
			if before != bs[0] {
				t.Fatalf("key %d moved from %s, which stayed", i, before.URL)
			}
		}
	}
	// 2,000 (1/9) and 2,250 (1/8) expected, spread about 42 and 44.
	if joined < 1750 || joined > 2250 {
		t.Errorf("%d of %d keys moved to the 9th backend, want about %d", joined, keys, keys/9)
	}
	if left < 2000 || left > 2500 {
		t.Errorf("%d of %d keys moved off the backend that left, want about %d", left, keys, keys/8)
	}
}

// TestRendezvousBoundedLoads: a key's home takes it while its load is under
// ceil(1.5 × (in flight + 1) ÷ 4); above, the key goes on in its order.
func TestRendezvousBoundedLoads(t *testing.T) {
	bs := backends(t, 4)
	p := sessionPolicy(t) // load factor 1.5
	req := sessionKey(7)
	ord := keyOrder(t, p, req, bs)
	cases := []struct {
		name  string
		loads [4]int // in flight on the key's 1st..4th backend
		want  int    // rank picked
	}{
		{"idle: home", [4]int{0, 0, 0, 0}, 0},
		{"home busy alone: bound ceil(1.5×2/4) = 1", [4]int{1, 0, 0, 0}, 1},
		{"home at the mean: bound ceil(1.5×13/4) = 5", [4]int{3, 3, 3, 3}, 0},
		{"home under the bound: ceil(1.5×15/4) = 6", [4]int{5, 3, 3, 3}, 0},
		{"home at the bound: ceil(1.5×16/4) = 6", [4]int{6, 3, 3, 3}, 1},
		{"home and second over: ceil(1.5×17/4) = 7", [4]int{8, 8, 0, 0}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, n := range c.loads {
				withInFlight(t, ord[i], n)
			}
			b, why := p.Pick(req, bs, all)
			if b != ord[c.want] || why.Value != float64(c.want) {
				t.Fatalf("picked rank %v, want %d", why.Value, c.want)
			}
		})
	}
	// Every load released: back home.
	if b, why := p.Pick(req, bs, all); b != ord[0] || why.Value != 0 {
		t.Fatalf("picked rank %v once loads fell, want its home", why.Value)
	}
}

func TestRendezvousLoadBound(t *testing.T) {
	cases := []struct {
		factor float64
		total  int64
		n      int
		want   int64
	}{
		{1.25, 0, 4, 1}, // an idle pool admits one each
		{1.25, 2, 4, 1},
		{1.25, 4, 4, 2}, // ceil(1.5625)
		{1.25, 12, 4, 5},
		{1, 7, 4, 2}, // strict balance: ceil(mean after this request)
		{1, 8, 4, 3},
		{1.5, 99, 1, 150},
	}
	for _, c := range cases {
		if got := loadBound(c.factor, c.total, c.n); got != c.want {
			t.Errorf("loadBound(%v, %d, %d) = %d, want %d", c.factor, c.total, c.n, got, c.want)
		}
	}
}

func TestRendezvousSkipsUnacceptable(t *testing.T) {
	bs := backends(t, 5)
	p := sessionPolicy(t)
	req := sessionKey(3)
	ord := keyOrder(t, p, req, bs) // checks each rank on the way
	// Load on unacceptable backends does not count toward the bound: the
	// home's 1 in flight is under ceil(1.5 × 2 ÷ 2) = 2 with the 4th and
	// 5th out, though 50 wait on the 3rd.
	withInFlight(t, ord[0], 1)
	withInFlight(t, ord[2], 50)
	if b, _ := p.Pick(req, bs, only(ord[0], ord[3])); b != ord[0] {
		t.Fatalf("picked %s, want the key's home", b.URL)
	}
	if b, _ := p.Pick(req, bs, only()); b != nil {
		t.Fatalf("picked %s with nothing acceptable", b.URL)
	}
	if b, _ := p.Pick(req, nil, all); b != nil {
		t.Fatal("picked from no candidates")
	}
}

// More candidates than the stack buffer holds are rendezvousCand alike.
func TestRendezvousManyBackends(t *testing.T) {
	bs := make([]*proxy.Backend, rendezvousStack+36)
	for i := range bs {
		bs[i] = backendAt(t, "http://engine-"+strconv.Itoa(i)+":30000")
	}
	p := sessionPolicy(t)
	req := sessionKey(11)
	ord := keyOrder(t, p, req, bs)
	withInFlight(t, ord[0], 1)
	if b, why := p.Pick(req, bs, all); b != ord[1] || why.Value != 1 {
		t.Fatalf("picked rank %v, want 1 (the home is over its bound)", why.Value)
	}
}
