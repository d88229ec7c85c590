package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"pdlb/bench/sim"
	"pdlb/config"
)

// simCmd runs a simulated cluster until SIGINT or SIGTERM.
func simCmd(args []string) error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(stop)
	return runSim(args, stop, os.Stdout)
}

// runSim parses the flags, starts the cluster, prints where it listens and
// how to put pdlb in front, and stops it when stop delivers.
func runSim(args []string, stop <-chan os.Signal, out io.Writer) error {
	d := sim.Defaults()
	fs := flag.NewFlagSet("pdlb sim", flag.ContinueOnError)
	o := sim.Options{}
	fs.IntVar(&o.Prefills, "prefill", d.Prefills, "prefill engines")
	fs.IntVar(&o.Decodes, "decode", d.Decodes, "decode engines")
	fs.StringVar(&o.Host, "host", d.Host, "address the engines and the stats listener bind")
	fs.IntVar(&o.BasePort, "base-port", 30000, "first prefill's port; the other engines take the next ports (0: any free ports)")
	fs.IntVar(&o.StatsPort, "stats-port", 0, "stats listener's port: GET /stats, POST /reset (default: base port + 100; -1: none)")
	fs.DurationVar(&o.PrefillPerToken, "prefill-per-token", d.PrefillPerToken, "model: prefill time per uncached prompt token")
	fs.DurationVar(&o.PrefillOverhead, "prefill-overhead", d.PrefillOverhead, "model: fixed time of each prefill")
	fs.IntVar(&o.PrefillSlots, "prefill-slots", d.PrefillSlots, "model: prefills one engine computes at once (the rest queue)")
	fs.IntVar(&o.KVCacheTokens, "kv-cache-tokens", d.KVCacheTokens, "model: each prefill's KV prefix cache capacity in tokens (-1: none)")
	fs.IntVar(&o.BlockSize, "block-size", d.BlockSize, "model: KV cache block in tokens")
	fs.DurationVar(&o.DecodePerToken, "decode-per-token", d.DecodePerToken, "model: decode time per output token")
	fs.DurationVar(&o.DecodePerTokenPerBatch, "decode-per-token-per-batch", d.DecodePerTokenPerBatch, "model: added per output token for each request decoding on the engine")
	fs.IntVar(&o.MaxBatch, "max-batch", d.MaxBatch, "model: requests one decode serves at once (the rest queue)")
	fs.IntVar(&o.OutputLen, "output-len", d.OutputLen, "model: output tokens when the request does not say")
	fs.Float64Var(&o.TimeScale, "time-scale", d.TimeScale, "model: multiplies every modelled delay (0.2: five simulated seconds per real second)")
	fs.StringVar(&o.Model, "model", d.Model, "model name the engines report")
	level := fs.String("log-level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return &exitError{2, err}
	}
	if fs.NArg() > 0 {
		return &exitError{2, fmt.Errorf("sim: unexpected argument %q", fs.Arg(0))}
	}
	if o.BasePort < 0 || o.BasePort > 65535 {
		return &exitError{2, fmt.Errorf("sim: --base-port %d out of range 0..65535", o.BasePort)}
	}
	if o.TimeScale <= 0 {
		return &exitError{2, fmt.Errorf("sim: --time-scale %g must be positive", o.TimeScale)}
	}
	log, flushLog := newLogger(config.Log{Level: *level, Format: "console"})
	defer flushLog()
	c, err := sim.Start(o, log)
	if err != nil {
		return &exitError{1, err}
	}
	o = c.Options()
	fmt.Fprintf(out, "pdlb sim: %d prefill + %d decode engines, time scale %g\n", o.Prefills, o.Decodes, o.TimeScale)
	serve := []string{"pdlb serve --bootstrap-mode off"}
	for _, u := range c.PrefillURLs() {
		fmt.Fprintf(out, "  prefill %s\n", u)
		serve = append(serve, "--prefill "+u+" none")
	}
	for _, u := range c.DecodeURLs() {
		fmt.Fprintf(out, "  decode  %s\n", u)
		serve = append(serve, "--decode "+u)
	}
	if s := c.StatsURL(); s != "" {
		fmt.Fprintf(out, "  stats   %s/stats (POST %s/reset clears caches and counters)\n", s, s)
	}
	fmt.Fprintf(out, "Put pdlb in front:\n  %s\nCtrl-C stops.\n", strings.Join(serve, " "))
	<-stop
	return c.Shutdown()
}
