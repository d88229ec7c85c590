// Command pdlb-policies runs every selection policy on a simulated PD
// cluster (pdlb sim) under workloads with the shape of real traffic and
// writes bench/POLICIES.md with a chart: TTFT, throughput, cache hit rate
// against the simulator's upper bound, prefill load imbalance, and pdlb's
// CPU per request. bench/policies.sh builds pdlb and runs it.
//
// Each (workload, policy) run starts a fresh pdlb in front of the same
// simulated engines, clears the engines' caches and counters (POST
// /reset), sends the workload with a fixed seed (the same prompts for every
// policy) and reads the engines' figures.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pdlb/bench/load"
	"pdlb/bench/sim"
)

// policyPair is what one run configures: the prefill and the decode policy,
// and settings of theirs (pdlb serve --set) when not the defaults.
type policyPair struct {
	prefill, decode string
	sets            []string
}

func (p policyPair) String() string {
	s := p.prefill + " / " + p.decode
	if len(p.sets) > 0 {
		s += " (" + strings.Join(p.sets, ", ") + ")"
	}
	return s
}

// The pairs compared. The decode has no prefix cache to win (its KV comes
// from the prefill), so past the random baseline it is balanced by load.
var pairs = []policyPair{
	{prefill: "random", decode: "random"},
	{prefill: "round_robin", decode: "round_robin"},
	{prefill: "power_of_two", decode: "power_of_two"},
	{prefill: "cache_aware", decode: "power_of_two"},
	{prefill: "prefix_hash", decode: "power_of_two"},
	{prefill: "consistent_hashing", decode: "power_of_two"},
}

// simFlags change pdlb sim's default model: a prefill token costs 400 µs
// (simulated), four times the default, so that the prefills are busy at
// request rates a 2-core machine drives with pdlb, the load generator and
// the engines on it (the offered load, not the per-token cost, is what the
// policies are compared at).
var simFlags = []string{"--prefill-per-token", "400us"}

// workload is one traffic shape and the load it is offered at.
type workload struct {
	name, about string
	opts        load.Options
}

// workloads are the shapes measured; their parameters are chosen so that
// the random policy keeps the simulated prefills busy but not saturated
// (see bench/POLICIES.md, which prints them).
func workloads(duration time.Duration, seed int64) []workload {
	base := load.Options{Stream: true, Duration: duration, Seed: seed, Rounds: 1, OutputLen: load.Dist{Min: 32, Max: 32}, Timeout: 5 * time.Minute}
	multiturn := base
	multiturn.Workload = load.WorkloadMultiturn
	multiturn.Sessions, multiturn.Turns = 36, load.Dist{Min: 4, Max: 8}
	multiturn.SystemPrompts, multiturn.SystemLen, multiturn.InputLen = 4, 512, load.Dist{Min: 128, Max: 128}
	multiturn.ThinkTime = 400 * time.Millisecond
	shared := base
	shared.Workload = load.WorkloadShared
	shared.Rate, shared.Concurrency = 40, 1024
	shared.SystemPrompts, shared.SystemLen, shared.InputLen = 64, 2048, load.Dist{Min: 128, Max: 128}
	unique := base
	unique.Workload = load.WorkloadUnique
	unique.Concurrency, unique.SystemLen, unique.InputLen = 1024, 2048, load.Dist{Min: 128, Max: 128}
	unique.Rate = 14 // every token uncached: the prefills' work per request is about three times shared's
	return []workload{
		{"multiturn", "chat sessions that resend their history (36 open, 4–8 turns, 512-word system prompt of 4, 128-word user turns, 400 ms think time)", multiturn},
		{"shared", "64 system prompts of 2048 words with Zipf popularity (s 1.1) before a unique 128-word message, 40 req/s open loop", shared},
		{"unique", "the no-sharing control: prompts as long as shared's, unique from their first word, 14 req/s open loop", unique},
	}
}

// result is one run's figures.
type result struct {
	Workload, Prefill, Decode  string
	TTFT                       load.Percentiles
	ReqPerSec                  float64
	Completed, Failed          int64
	HitRate, HitRateBound      float64
	PrefillImbalance           float64 // max ÷ mean of the prefills' held time
	DecodeImbalance            float64
	PrefillUtilization         float64 // mean over the prefills
	CPUMicrosPerReq            float64
	PrefillRequests            []int64
	ClientHitRate              float64 // from the answers' cached_tokens
	ClientPrompt, ClientCached int64
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pdlb-policies:", err)
		os.Exit(1)
	}
}

func run() error {
	pdlb := flag.String("pdlb", "bench/out/bin/pdlb", "the pdlb binary")
	outDir := flag.String("out", "bench/out/policies", "folder for logs and the raw results")
	report := flag.String("report", "bench/POLICIES.md", "the report to write")
	chart := flag.String("chart", "bench/POLICIES.svg", "the chart to write")
	duration := flag.Duration("duration", 40*time.Second, "length of each run")
	seed := flag.Int64("seed", 1, "seed of every workload")
	basePort := flag.Int("base-port", 24000, "the simulated engines' first port (pdlb listens on base+200)")
	only := flag.String("workloads", "", "comma-separated workloads to run (default all)")
	from := flag.String("from", "", "write the report from this results.json of an earlier run instead of running")
	extra := flag.String("try", "", "instead of the policies compared, try one prefill policy with settings: NAME[,key=value…] (repeat with ';')")
	flag.Parse()
	if *from != "" {
		raw, err := os.ReadFile(*from)
		if err != nil {
			return err
		}
		var results []result
		if err := json.Unmarshal(raw, &results); err != nil {
			return err
		}
		return writeReport(*report, *chart, fmt.Sprintf("DURATION=%v bench/policies.sh", *duration), *duration, *seed, results)
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	simCmd, statsURL, engines, err := startSim(*pdlb, *outDir, *basePort)
	if err != nil {
		return err
	}
	defer stop(simCmd)
	runPairs := pairs
	if *extra != "" {
		// A try is not the comparison: its report goes beside its logs.
		*report, *chart = filepath.Join(*outDir, "TRY.md"), filepath.Join(*outDir, "TRY.svg")
		runPairs = nil
		for _, spec := range strings.Split(*extra, ";") {
			f := strings.Split(spec, ",")
			runPairs = append(runPairs, policyPair{prefill: f[0], decode: "power_of_two", sets: f[1:]})
		}
	}
	var results []result
	for _, wl := range workloads(*duration, *seed) {
		if *only != "" && !strings.Contains(","+*only+",", ","+wl.name+",") {
			continue
		}
		for _, pp := range runPairs {
			fmt.Printf("%s, %s…\n", wl.name, pp)
			r, err := runOne(*pdlb, *outDir, *basePort+200, engines, statsURL, wl, pp)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", wl.name, pp, err)
			}
			fmt.Printf("  TTFT mean %.0f p99 %.0f ms, %.1f req/s, hit %.3f (bound %.3f), prefill imbalance %.2f\n",
				r.TTFT.Mean, r.TTFT.P99, r.ReqPerSec, r.HitRate, r.HitRateBound, r.PrefillImbalance)
			results = append(results, r)
		}
	}
	raw, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(filepath.Join(*outDir, "results.json"), raw, 0o644); err != nil {
		return err
	}
	cmdline := fmt.Sprintf("DURATION=%v bench/policies.sh", *duration)
	if *only != "" {
		cmdline = "WORKLOADS=" + *only + " " + cmdline
	}
	return writeReport(*report, *chart, cmdline, *duration, *seed, results)
}

// startSim starts `pdlb sim` with its default model and returns the stats
// URL and the engines' URLs (prefills then decodes).
func startSim(pdlb, outDir string, basePort int) (*exec.Cmd, string, []string, error) {
	logf, err := os.Create(filepath.Join(outDir, "sim.log"))
	if err != nil {
		return nil, "", nil, err
	}
	cmd := exec.Command(pdlb, append([]string{"sim", "--base-port", strconv.Itoa(basePort)}, simFlags...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, "", nil, err
	}
	var engines []string
	for i := range 8 {
		engines = append(engines, "http://127.0.0.1:"+strconv.Itoa(basePort+i))
	}
	statsURL := "http://127.0.0.1:" + strconv.Itoa(basePort+100)
	if err := waitPort(basePort+100, 10*time.Second); err != nil {
		stop(cmd)
		return nil, "", nil, fmt.Errorf("pdlb sim: %w (see %s)", err, logf.Name())
	}
	return cmd, statsURL, engines, nil
}

func runOne(pdlb, outDir string, port int, engines []string, statsURL string, wl workload, pp policyPair) (result, error) {
	args := []string{"serve", "--bootstrap-mode", "off", "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--set", "admin.port=0", "--set", "policy.prefill=" + pp.prefill, "--set", "policy.decode=" + pp.decode,
		"--log-format", "json", "--log-level", "warn"}
	for _, kv := range pp.sets {
		args = append(args, "--set", kv)
	}
	for _, u := range engines[:4] {
		args = append(args, "--prefill", u, "none")
	}
	for _, u := range engines[4:] {
		args = append(args, "--decode", u)
	}
	logf, err := os.Create(filepath.Join(outDir, wl.name+"-"+pp.prefill+"-"+pp.decode+strings.Join(pp.sets, "_")+".log"))
	if err != nil {
		return result{}, err
	}
	defer logf.Close()
	cmd := exec.Command(pdlb, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer stop(cmd)
	if err := waitPort(port, 10*time.Second); err != nil {
		return result{}, err
	}
	if err := post(statsURL + "/reset"); err != nil {
		return result{}, err
	}
	o := wl.opts
	o.Targets = []string{"http://127.0.0.1:" + strconv.Itoa(port)}
	o.PIDs = []int{cmd.Process.Pid}
	rep, err := load.Run(context.Background(), o)
	if err != nil {
		return result{}, err
	}
	var st sim.Report
	if err := getJSON(statsURL+"/stats", &st); err != nil {
		return result{}, err
	}
	m := rep.Targets[0].Median
	r := result{
		Workload: wl.name, Prefill: pp.prefill, Decode: pp.decode,
		TTFT: m.TTFT, ReqPerSec: m.ReqPerSec, Completed: m.Completed, Failed: m.Failed,
		HitRate: st.Cluster.HitRate, HitRateBound: st.Cluster.HitRateBound,
		CPUMicrosPerReq: m.CPUMicrosPerReq, ClientHitRate: m.CacheHitRate, ClientPrompt: m.PromptTokens, ClientCached: m.CachedTokens,
	}
	var pHeld, dHeld []float64
	for _, e := range st.Engines {
		if e.Role == "prefill" {
			pHeld = append(pHeld, e.Held)
			r.PrefillRequests = append(r.PrefillRequests, e.Requests)
			r.PrefillUtilization += e.Utilization / 4
		} else {
			dHeld = append(dHeld, e.Held)
		}
	}
	r.PrefillImbalance, r.DecodeImbalance = imbalance(pHeld), imbalance(dHeld)
	return r, nil
}

// imbalance is max ÷ mean (1: perfectly even; 0 with no work).
func imbalance(xs []float64) float64 {
	var sum, most float64
	for _, x := range xs {
		sum += x
		most = max(most, x)
	}
	if sum == 0 {
		return 0
	}
	return most / (sum / float64(len(xs)))
}

func waitPort(port int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on port %d after %v", port, within)
}

func stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func post(url string) error {
	resp, err := http.Post(url, "application/json", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return errors.New(url + ": " + resp.Status)
	}
	return nil
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
