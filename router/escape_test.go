package router

import (
	"os/exec"
	"regexp"
	"testing"
)

// escapeAnalysis builds the package with -gcflags=-m and returns what the
// compiler said.
func escapeAnalysis(t *testing.T) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the package with -gcflags=-m")
	}
	out, err := exec.Command("go", "build", "-gcflags=-m", "-o", "/dev/null", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`select\.go:\d+:\d+: .*escapes to heap`).Match(out) {
		t.Fatalf("no escape analysis in the compiler's output (a cached build that printed nothing?):\n%s", out)
	}
	return out
}

// TestRequestValueStaysOnTheStack: the request value (about 850 bytes) is
// built on servePD's stack. A closure that captures it and escapes (into a
// policy, a goroutine) moves every request to the heap: +1 allocation and
// +850 bytes per request, invisible to the allocation counts of most
// benchmarks (pair health's selection did that once). The compiler's
// escape analysis says so; this test reads it.
func TestRequestValueStaysOnTheStack(t *testing.T) {
	out := escapeAnalysis(t)
	if m := regexp.MustCompile(`(?m)^.*pd\.go:\d+:\d+: moved to heap: q$`).Find(out); m != nil {
		t.Errorf("the request value escapes: %s\n(look for a closure capturing q that escapes: go build -gcflags=-m ./router | grep 'leaking param: q')", m)
	}
}

// TestSelectionBuildsNoClosures: pair selection (select.go, selection.go)
// hands the policies its pooled filter, never a closure made per request,
// which would escape into the policy interface and cost an allocation each.
// TestPickPairAllocatesNothing counts the allocations, but cannot under
// -race (which CI runs); the escape analysis holds there too.
func TestSelectionBuildsNoClosures(t *testing.T) {
	out := escapeAnalysis(t)
	for _, m := range regexp.MustCompile(`(?m)^.*select(ion)?\.go:\d+:\d+: (func literal escapes to heap|moved to heap: .*)$`).FindAll(out, -1) {
		t.Errorf("pair selection allocates per request: %s", m)
	}
}
