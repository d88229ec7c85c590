package mock

import (
	"fmt"
	"testing"

	"github.com/rs/zerolog"
)

func nopLog() zerolog.Logger { return zerolog.Nop() }

func TestStatsRecordsBodies(t *testing.T) {
	e, url := startEngine(t, Options{TokenDelay: -1})
	for i := 0; i < 70; i++ {
		post(t, url+"/generate", fmt.Sprintf(`{"text":"a","bootstrap_room":%d}`, i))
	}
	do(t, "GET", url+"/health", "")
	post(t, url+"/nowhere", `{"x":1}`)
	s := e.Stats()
	if s.Requests["/generate"] != 70 || s.Requests["/health"] != 1 || s.Requests["(unknown)"] != 1 {
		t.Errorf("Requests %v", s.Requests)
	}
	if len(s.Bodies) != recentBodies {
		t.Fatalf("%d bodies kept, want %d", len(s.Bodies), recentBodies)
	}
	if s.LastPath != "/nowhere" || string(s.LastBody) != `{"x":1}` {
		t.Errorf("last %s %s", s.LastPath, s.LastBody)
	}
	// Oldest first: 70 generate + 1 unknown, the last 64 of them.
	if got := string(s.Bodies[0].Body); got != `{"text":"a","bootstrap_room":7}` {
		t.Errorf("oldest kept body %s", got)
	}
	s.Bodies[1].Body[0] = 'X' // a copy: must not change the engine's record
	if string(e.Stats().Bodies[1].Body[:1]) != "{" {
		t.Error("Stats returned the engine's own buffer")
	}
}
