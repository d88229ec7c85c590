package service

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The dashboard and the alert rules shipped in deploy/, relative to this
// package.
var (
	dashboardFile  = filepath.Join("..", "..", "..", "deploy", "grafana", "pdlb.json")
	alertsFile     = filepath.Join("..", "..", "..", "deploy", "prometheus", "alerts.yaml")
	alertTestsFile = filepath.Join("..", "..", "..", "deploy", "prometheus", "alerts_test.yaml")
)

// lookPromtool finds promtool (Debian package prometheus). Without it the
// test skips, except under CI (CI set), which fails.
func lookPromtool(t *testing.T) string {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not on PATH under CI (Debian package prometheus)")
		}
		t.Skip("promtool not on PATH (Debian package prometheus)")
	}
	return promtool
}

// dashboardPanel is the part of a Grafana panel the tests read; rows nest
// their panels when collapsed.
type dashboardPanel struct {
	ID         int              `json:"id"`
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	Datasource *json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// dashboardQueries reads the dashboard and returns each panel's queries,
// keyed by "title/refId", with Grafana's variables replaced by values
// Prometheus accepts.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string           `json:"uid"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" {
		t.Errorf("%s has no uid: a provisioned copy would get a new URL on every load", dashboardFile)
	}
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	queries := map[string]string{}
	ids := map[int]string{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d is missing or also %q's", p.Title, p.ID, other)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 || p.Datasource == nil {
				t.Errorf("panel %q has no queries or no data source", p.Title)
			}
			for _, q := range p.Targets {
				queries[p.Title+"/"+q.RefID] = grafanaVars.Replace(q.Expr)
			}
		}
	}
	walk(d.Panels)
	return queries
}

// alertExpressions reads the alert rules and returns each one's expression
// by alert name.
func alertExpressions(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	exprs := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	return exprs
}

// PromQL pieces that are not metric names: strings (label values),
// label matchers, range and subquery durations, grouping clauses, and
// names followed by "(" (functions and aggregations).
var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlName     = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?`)
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "inf", "nan", "Inf", "NaN"}
)

// metricNames returns the metric names a PromQL expression selects.
func metricNames(expr string) []string {
	for _, re := range []*regexp.Regexp{promqlString, promqlMatchers, promqlRanges, promqlGrouping} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var names []string
	for _, m := range promqlName.FindAllStringSubmatch(expr, -1) {
		if name, call := m[1], m[2] != ""; !call && !slices.Contains(promqlKeywords, name) {
			names = append(names, name)
		}
	}
	return names
}

func TestMetricNamesOfPromQL(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (status) (rate(pdlb_requests_total{instance=~"a|b",status!="x{y}"}[5m]))`:       {"pdlb_requests_total"},
		`histogram_quantile(0.99, sum by (le, route) (rate(pdlb_ttft_seconds_bucket[1m:10s])))`: {"pdlb_ttft_seconds_bucket"},
		`a_total / ignoring(x) group_left (y) (b > 0) and on() c offset 5m > bool 1e3`:          {"a_total", "b", "c"},
		`min_over_time(pdlb_breaker_state[2m]) > 0`:                                             {"pdlb_breaker_state"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// sampleNames are the metric names of a scrape's samples (a histogram's
// _bucket, _sum and _count each).
func sampleNames(scrape string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(scrape, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// TestDashboardAndAlertMetricsExist: every metric the Grafana dashboard and
// the alert rules query is one pdlb exposes, and the dashboard covers what
// an operator must see (rates by status, TTFT and duration quantiles,
// in-flight per backend, breakers, registry readiness, the admission
// queue, retries).
func TestDashboardAndAlertMetricsExist(t *testing.T) {
	exposed := sampleNames(scrapeBusyLB(t))
	used := map[string]bool{}
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !exposed[n] {
				t.Errorf("%s queries %s, which pdlb's /metrics does not expose", where, n)
			}
		}
	}
	queries := dashboardQueries(t)
	for where, expr := range queries {
		check("dashboard panel "+where, expr)
	}
	alerts := alertExpressions(t)
	for name, expr := range alerts {
		check("alert "+name, expr)
	}
	for _, want := range []string{"pdlb_requests_total", "pdlb_ttft_seconds_bucket", "pdlb_request_duration_seconds_bucket",
		"pdlb_backend_in_flight", "pdlb_breaker_state", "pdlb_backend_registry_ready", "pdlb_admission_queued", "pdlb_retries_total"} {
		if !used[want] {
			t.Errorf("neither the dashboard nor the alerts show %s", want)
		}
	}
	for _, want := range []string{"PdlbPrefillUnregistered", "PdlbBreakerOpen", "PdlbHighErrorRatio", "PdlbAdmissionQueueSaturated", "PdlbClusterStoreDown", "PdlbPairAvoided", "PdlbEngineRefusesAborts"} {
		if alerts[want] == "" {
			t.Errorf("alerts.yaml lacks %s", want)
		}
	}
}

// TestDashboardQueriesParse runs every dashboard query through Prometheus's
// own parser: promtool checks them as recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := lookPromtool(t)
	queries := dashboardQueries(t)
	titles := slices.Sorted(func(yield func(string) bool) {
		for k := range queries {
			if !yield(k) {
				return
			}
		}
	})
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, title := range titles {
		q, err := json.Marshal(queries[title]) // a JSON string is a YAML string
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("a dashboard query does not parse: %v\n%s\nqueries in order: %q", err, out, titles)
	}
}

// TestAlertRules: promtool accepts the rules, and its unit tests
// (deploy/prometheus/alerts_test.yaml) see each alert fire on the series
// it is for, and stay quiet on the near misses.
func TestAlertRules(t *testing.T) {
	promtool := lookPromtool(t)
	// promtool reads the files in another process, which go test's result
	// cache does not see: reading them here reruns this test when they change.
	for _, f := range []string{alertsFile, alertTestsFile} {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(promtool, "check", "rules", alertsFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := exec.Command(promtool, "test", "rules", alertTestsFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
