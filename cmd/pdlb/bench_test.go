package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The workload flags reach the load generator, and the JSON report carries the workload
// and the cache figures the answers reported.
func TestBenchWorkloadFlags(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Text string }
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		words := len(strings.Fields(req.Text))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"text":"ok","meta_info":{"prompt_tokens":%d,"completion_tokens":1,"cached_tokens":%d}}`, words, words-3)
	}))
	defer engine.Close()
	for _, wl := range []string{"multiturn", "shared", "unique"} {
		t.Run(wl, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report.json")
			args := []string{"bench", "--quiet", "--targets", engine.URL, "--workload", wl, "--requests", "12",
				"--system-len", "20", "--input-len", "3", "--output-len", "1", "--out", out}
			if wl == "multiturn" {
				args = append(args, "--sessions", "2", "--turns", "2-3", "--think-time", "1ms")
			} else {
				args = append(args, "--concurrency", "2")
			}
			if wl != "unique" {
				args = append(args, "--system-prompts", "3", "--zipf-s", "0.8")
			}
			if err := run(args); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				Config struct {
					Workload      string  `json:"workload"`
					Sessions      int     `json:"sessions"`
					Turns         string  `json:"turns"`
					SystemPrompts int     `json:"system_prompts"`
					SystemLen     int     `json:"system_len"`
					ZipfS         float64 `json:"zipf_s"`
				} `json:"config"`
				Targets []struct {
					Median struct {
						Completed    int64   `json:"completed"`
						PromptTokens int64   `json:"prompt_tokens"`
						CachedTokens int64   `json:"cached_tokens"`
						HitRate      float64 `json:"cache_hit_rate"`
					} `json:"median"`
				} `json:"targets"`
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			c, m := rep.Config, rep.Targets[0].Median
			if c.Workload != wl || c.SystemLen != 20 || m.Completed != 12 {
				t.Errorf("config %+v, completed %d", c, m.Completed)
			}
			if wl == "multiturn" && (c.Sessions != 2 || c.Turns != "2-3" || c.SystemPrompts != 3 || c.ZipfS != 0.8) {
				t.Errorf("multiturn flags lost: %+v", c)
			}
			if m.PromptTokens < 12*23 || m.CachedTokens != m.PromptTokens-12*3 || m.HitRate <= 0 || m.HitRate >= 1 {
				t.Errorf("prompt %d, cached %d, hit rate %g", m.PromptTokens, m.CachedTokens, m.HitRate)
			}
		})
	}
}

func TestBenchWorkloadMisuseExitsTwo(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--workload", "chat"},
		{"bench", "--workload", "multiturn", "--concurrency", "8"},
		{"bench", "--workload", "shared", "--sessions", "8"},
		{"bench", "--workload", "shared", "--route", "/v1/chat/completions"},
		{"bench", "--system-len", "100"},
		{"bench", "--workload", "multiturn", "--turns", "x"},
	} {
		if err := run(args); exitCode(err) != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, exitCode(err), err)
		}
	}
}
