package main

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"pdlb/proxy/proxytest"
)

func TestSimStartsAndStops(t *testing.T) {
	var out proxytest.SyncBuffer
	stop := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		done <- runSim([]string{"--prefill", "2", "--decode", "1", "--base-port", "0", "--time-scale", "0.01", "--output-len", "3"}, stop, &out)
	}()
	if !proxytest.WaitFor(5*time.Second, func() bool { return strings.Contains(string(out.Bytes()), "Ctrl-C stops.") }) {
		t.Fatalf("no ready line; output so far:\n%s", out.Bytes())
	}
	text := string(out.Bytes())
	prefills := regexp.MustCompile(`--prefill (http://\S+) none`).FindAllStringSubmatch(text, -1)
	decodes := regexp.MustCompile(`--decode (http://\S+)`).FindAllStringSubmatch(text, -1)
	stats := regexp.MustCompile(`stats +(http://\S+)/stats`).FindStringSubmatch(text)
	if len(prefills) != 2 || len(decodes) != 1 || stats == nil || !strings.Contains(text, "pdlb serve --bootstrap-mode off") {
		t.Fatalf("output:\n%s", text)
	}
	// A PD request through the printed URLs.
	body := `{"text":"a b c d e f g h i j k l m n o p q","bootstrap_room":9}`
	prefilled := make(chan int, 1)
	go func() {
		resp, err := http.Post(prefills[0][1]+"/generate", "application/json", strings.NewReader(body))
		if err != nil {
			prefilled <- 0
			return
		}
		resp.Body.Close()
		prefilled <- resp.StatusCode
	}()
	resp, answer := proxytest.Post(t, decodes[0][1]+"/generate", body)
	if status := <-prefilled; status != 200 {
		t.Errorf("prefill: %d", status)
	}
	if resp.StatusCode != 200 || !strings.Contains(answer, `"completion_tokens":3`) {
		t.Errorf("decode: %d %s", resp.StatusCode, answer)
	}
	_, b := proxytest.Get(t, stats[1]+"/stats")
	var report struct {
		Cluster struct {
			InputTokens int `json:"input_tokens"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal([]byte(b), &report); err != nil || report.Cluster.InputTokens != 17 {
		t.Errorf("stats %v: %s", err, b)
	}
	stop <- syscall.SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pdlb sim ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pdlb sim did not stop")
	}
}

func TestSimUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--prefill", "x"}, {"--time-scale", "-1"}, {"--base-port", "70000"}, {"extra"}} {
		if err := runSim(args, nil, &proxytest.SyncBuffer{}); exitCode(err) != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, exitCode(err), err)
		}
	}
}
