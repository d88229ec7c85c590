package router

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pdlbName is a pdlb_ metric name inside a string literal.
var pdlbName = regexp.MustCompile(`pdlb_[a-z0-9_]*[a-z0-9]`)

// TestMetricFamiliesAreDescribed: every pdlb_ metric name written anywhere
// in the module's (non-test) Go code is a family of the table, or a
// histogram's sample of one; every pdlb_ family of the table is written
// somewhere and listed in the README; and each entry is well formed.
func TestMetricFamiliesAreDescribed(t *testing.T) {
	used := map[string]string{} // family → where
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if v, ok := n.(*ast.ValueSpec); ok && f.Name.Name == "router" && len(v.Names) == 1 && v.Names[0].Name == "families" {
				return false // the table itself
			}
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				for _, name := range pdlbName.FindAllString(lit.Value, -1) {
					used[name] = fset.Position(lit.Pos()).String()
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, where := range used {
		if _, ok := families[name]; !ok {
			t.Errorf("%s (%s) has no entry in families: give it a HELP and a TYPE there", name, where)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range families {
		if !strings.HasPrefix(name, "pdlb_") {
			continue
		}
		if _, ok := used[name]; !ok {
			t.Errorf("%s is in families but no code writes it", name)
		}
		if !bytes.Contains(readme, []byte("`"+name+"`")) {
			t.Errorf("%s is not in the README's metrics table", name)
		}
		if f.typ == typeCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: type %s; counters, and only they, end in _total", name, f.typ)
		}
	}
	for name, f := range families {
		switch {
		case f.typ != typeCounter && f.typ != typeGauge && f.typ != typeHistogram && f.typ != typeSummary:
			t.Errorf("%s: type %q", name, f.typ)
		case strings.TrimSpace(f.help) == "" || strings.ContainsAny(f.help, "\\\n"):
			t.Errorf("%s: help %q: want text, without backslashes or newlines", name, f.help)
		}
	}
}

// TestMetricsWriteFamilies: the scrape-time regrouping of raw samples.
func TestMetricsWriteFamilies(t *testing.T) {
	for _, tc := range []struct{ name, raw, want string }{
		{
			name: "writers interleave families backend by backend",
			raw: "pdlb_backend_in_flight{url=\"a\"} 1\npdlb_backend_healthy{url=\"a\"} 1\n" +
				"pdlb_backend_in_flight{url=\"b\"} 2\npdlb_backend_healthy{url=\"b\"} 0\n",
			want: "# HELP pdlb_backend_in_flight " + families["pdlb_backend_in_flight"].help + "\n# TYPE pdlb_backend_in_flight gauge\n" +
				"pdlb_backend_in_flight{url=\"a\"} 1\npdlb_backend_in_flight{url=\"b\"} 2\n" +
				"# HELP pdlb_backend_healthy " + families["pdlb_backend_healthy"].help + "\n# TYPE pdlb_backend_healthy gauge\n" +
				"pdlb_backend_healthy{url=\"a\"} 1\npdlb_backend_healthy{url=\"b\"} 0\n",
		},
		{
			name: "a histogram's bucket, sum and count are one family",
			raw:  "pdlb_ttft_seconds_bucket{le=\"+Inf\"} 1\npdlb_ttft_seconds_sum 0.5\npdlb_ttft_seconds_count 1\n",
			want: "# HELP pdlb_ttft_seconds " + families["pdlb_ttft_seconds"].help + "\n# TYPE pdlb_ttft_seconds histogram\n" +
				"pdlb_ttft_seconds_bucket{le=\"+Inf\"} 1\npdlb_ttft_seconds_sum 0.5\npdlb_ttft_seconds_count 1\n",
		},
		{
			name: "a summary's quantiles, sum and count are one family",
			raw:  "go_gc_duration_seconds{quantile=\"1\"} 0.1\ngo_gc_duration_seconds_sum 0.2\ngo_gc_duration_seconds_count 3\n",
			want: "# HELP go_gc_duration_seconds " + families["go_gc_duration_seconds"].help + "\n# TYPE go_gc_duration_seconds summary\n" +
				"go_gc_duration_seconds{quantile=\"1\"} 0.1\ngo_gc_duration_seconds_sum 0.2\ngo_gc_duration_seconds_count 3\n",
		},
		{
			name: "foreign metadata is dropped, an unknown family passes without, a last line gets its newline",
			raw:  "# HELP unknown_thing\n# TYPE unknown_thing gauge\nunknown_thing 1\n\nunknown_thing_count 2",
			want: "unknown_thing 1\nunknown_thing_count 2\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			writeFamilies(&out, []byte(tc.raw))
			if got := out.String(); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestMetricsRequestAllocatesNothing: once a (route, status) has been seen,
// recording a request, its TTFT and a retry allocates nothing.
func TestMetricsRequestAllocatesNothing(t *testing.T) {
	m := NewMetrics(nil)
	record := func() {
		m.Request("/generate", 200, 3*time.Millisecond)
		m.TTFT("/generate", time.Millisecond)
		m.Retry("/generate")
	}
	record() // creates the series
	if n := testing.AllocsPerRun(1000, record); n != 0 {
		t.Fatalf("%v allocations per recorded request, want 0", n)
	}
}

func BenchmarkMetricsRequest(b *testing.B) {
	m := NewMetrics(nil)
	m.Request("/generate", 200, 3*time.Millisecond)
	m.TTFT("/generate", time.Millisecond)
	m.Retry("/generate")
	b.ReportAllocs()
	for b.Loop() {
		m.Request("/generate", 200, 3*time.Millisecond)
		m.TTFT("/generate", time.Millisecond)
		m.Retry("/generate")
	}
}
