package service

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// chromiumPath finds a Chromium to drive. Without one the browser test
// skips, except under CI (CI set), where it fails: .ci/run installs the
// Debian package chromium.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH under CI (Debian package chromium; .ci/run installs it)")
	}
	t.Skip("no chromium on PATH (Debian package chromium): the status page's browser test is skipped")
	return ""
}

// TestStatusPageInBrowser drives the status page in headless Chromium in
// front of a running pdlb and its engines: a killed decode turns unhealthy
// within three health intervals, a decode failing every request shows its
// breaker open, and the drain and undrain buttons work through the admin
// API. It saves a screenshot (to PDLB_SCREENSHOT when set, else the test's
// temporary directory).
func TestStatusPageInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	const healthEvery = time.Second
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":""}`))
	killed := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"ok"}`))
	drained := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"ok"}`))
	failing := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/health" {
			ctx.SetStatusCode(200)
			return
		}
		ctx.SetStatusCode(500)
		ctx.SetBodyString(`{"error":"CUDA out of memory"}`)
	})
	// A decode that cannot get this prefill's KV (SGLang's KV-transfer 500):
	// after breaker.pair_failures (3) the pair is avoided.
	kvFailing := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/health" {
			ctx.SetStatusCode(200)
			return
		}
		ctx.SetStatusCode(500)
		ctx.SetBodyString(`{"error":{"message":"Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=1)"}}`)
	})
	// The page's numbers come from the real sampler: a sample a second.
	l := startStatusLBClock(t, nil, []*proxytest.Engine{p}, []*proxytest.Engine{killed, drained, failing, kvFailing}, func(c *config.Config) {
		c.Policy.Prefill, c.Policy.Decode = "round_robin", "round_robin"
		c.Health = config.Health{Interval: healthEvery, Timeout: 500 * time.Millisecond, FailThreshold: 1, PassThreshold: 1}
		c.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: 3, OpenTimeout: 10 * time.Minute, HalfOpenMaxRequests: 1,
			PairFailures: 3, PairWindow: time.Minute, PairCooldown: time.Hour}
	})
	// Steady traffic, so the page has rates, a sparkline and errors to show.
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Go(func() {
		client := &http.Client{Timeout: 2 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-stop:
				client.CloseIdleConnections()
				return
			case <-time.After(20 * time.Millisecond):
			}
			req, _ := http.NewRequest("POST", l.URL+"/generate", strings.NewReader(`{"text":"hello"}`))
			req.Header.Set("X-Request-ID", "browser-"+strconv.Itoa(i))
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})
	t.Cleanup(func() { close(stop); traffic.Wait() })

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1320, 640), chromedp.Flag("hide-scrollbars", true))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	// The first Run starts the browser and lives as long as browser; each
	// step below gets its own deadline.
	if err := chromedp.Do(browser, chromedp.Navigate(l.Admin+"/")); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	cell := func(url, class string) string {
		return `document.querySelector('tr[data-url="` + url + `"] td.` + class + `')`
	}
	// waitFor polls a JavaScript predicate on the page until it holds.
	waitFor := func(what, predicate string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		ctx, cancel := context.WithTimeout(browser, within+time.Second)
		defer cancel()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](predicate,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(within)))
		if err != nil {
			t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		return time.Since(start)
	}
	text := func(el string) string { return `((e) => e ? e.textContent : "")(` + el + `)` }
	click := func(what, el string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 5*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("((e) => { if (e) e.click(); return !!e })("+el+")")); err != nil {
			t.Fatalf("clicking %s: %v", what, err)
		}
	}

	waitFor("the killed-to-be decode listed healthy", text(cell(killed.URL, "health"))+` === "healthy"`, 10*time.Second)

	// A killed decode turns unhealthy within three health intervals.
	killed.Close()
	took := waitFor("the killed decode shown unhealthy", text(cell(killed.URL, "health"))+` === "unhealthy"`, 3*healthEvery)
	t.Logf("killed decode shown unhealthy after %v (health interval %v)", took.Round(time.Millisecond), healthEvery)

	// A decode answering 500 to every request has its breaker open.
	waitFor("the failing decode's breaker shown open", text(cell(failing.URL, "breaker"))+`.startsWith("open")`, 10*time.Second)

	// Drain: the first click asks, the second drains.
	drain := `document.querySelector('tr[data-url="` + drained.URL + `"] button[data-action="drain"]')`
	click("drain", drain)
	waitFor("the drain asking for confirmation", text(drain)+` === "confirm drain"`, 2*time.Second)
	click("confirm drain", drain)
	waitFor("the drained decode shown draining", `["draining", "drained"].includes(`+text(cell(drained.URL, "state"))+`)`, 3*time.Second)
	waitFor("errors listed", `document.querySelectorAll('#errors td.cause').length > 0`, 5*time.Second)
	waitFor("the avoided pair listed", `[...document.querySelectorAll('#pairs td.url')].map((e) => e.textContent).join(" ") === "`+
		p.URL+" "+kvFailing.URL+`"`, 10*time.Second)
	waitFor("rates shown", `parseFloat(document.getElementById("r2xx").textContent) > 0`, 5*time.Second)

	shot, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := os.Getenv("PDLB_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "status-page.png")
	}
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))

	// Undrain puts it back.
	click("undrain", `document.querySelector('tr[data-url="`+drained.URL+`"] button[data-action="undrain"]')`)
	waitFor("the undrained decode shown serving", text(cell(drained.URL, "state"))+` === "serving"`, 3*time.Second)
	if b := l.svc.Pool.Find(drained.URL); b == nil || b.Draining() {
		t.Fatal("undrained in the page, not in the pool")
	}
}
