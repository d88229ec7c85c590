package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pdlb/bench/load"
)

// benchCmd runs the load generator: `pdlb bench --targets URL[,URL…] …`.
func benchCmd(args []string) error {
	fs := flag.NewFlagSet("pdlb bench", flag.ContinueOnError)
	var o load.Options
	targets := fs.String("targets", "http://127.0.0.1:8000", "comma-separated base URLs; several run in interleaved, rotated rounds (A B C, B C A, …) and are compared side by side")
	fs.StringVar(&o.Route, "route", load.RouteGenerate, "route: /generate, /v1/chat/completions or /v1/completions")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "closed loop: requests in flight (open loop: cap on outstanding requests) (default 64; multiturn: see --sessions)")
	fs.Float64Var(&o.Rate, "rate", 0, "open loop: Poisson arrivals at this many requests/s, multiturn: sessions/s (0: closed loop)")
	fs.DurationVar(&o.Duration, "duration", 0, "length of each round (default 10s unless --requests is set)")
	fs.IntVar(&o.Requests, "requests", 0, "requests per round instead of --duration")
	fs.IntVar(&o.Rounds, "rounds", 0, "rounds per target (default 3 with several targets, else 1)")
	fs.BoolVar(&o.Stream, "stream", false, "streaming requests (TTFT and inter-token latency are measured)")
	inLen := fs.String("input-len", "", "prompt length in words, with a --workload a user message's: N or A-B (uniform) (default 128; multiturn 64)")
	outLen := fs.String("output-len", "128", "output tokens: N or A-B (uniform)")
	fs.DurationVar(&o.Timeout, "timeout", 60*time.Second, "per-request timeout")
	pids := fs.String("pid-of-target", "", "comma-separated PIDs, one per target (0: none): CPU-µs per request and peak RSS of that process")
	out := fs.String("out", "", "also write the full report as JSON to this file")
	fs.Int64Var(&o.Seed, "seed", 1, "seed for request shapes, prompts and arrivals: the same seed sends the same prompts whatever the concurrency")
	fs.StringVar(&o.Workload, "workload", load.WorkloadNone, "prompts: none (\"r<i>\" then filler words, the same prompts in every round), multiturn (chat sessions resending their history with the engine's answers), "+
		"shared (Zipf-popular system prompts, then a unique user message) or unique (the no-sharing control, as long as shared); all but none send /generate \"text\"")
	fs.IntVar(&o.Sessions, "sessions", 0, "multiturn: chat sessions open at once, one request in flight each; one that ends is replaced (open loop: cap on open sessions) (default 64)")
	turns := fs.String("turns", "", "multiturn: requests per session: N or A-B (uniform) (default 6)")
	fs.DurationVar(&o.ThinkTime, "think-time", 0, "multiturn: pause between an answer and the session's next turn")
	fs.IntVar(&o.SystemPrompts, "system-prompts", 0, "multiturn, shared: distinct system prompts (default 4 multiturn, 16 shared)")
	fs.IntVar(&o.SystemLen, "system-len", 0, "multiturn, shared, unique: system prompt length in words (default 256 multiturn, 1024 shared and unique)")
	fs.Float64Var(&o.ZipfS, "zipf-s", 0, "multiturn, shared: Zipf exponent of system prompt popularity, rank k picked with probability ∝ 1/k^s (default 1.1)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	fs.StringVar(&o.CAFile, "ca-file", "", "PEM CAs that https:// targets' certificates chain to (default: the system's)")
	fs.StringVar(&o.APIKey, "api-key", "", "send \"Authorization: Bearer <key>\" (a pdlb with server.api_key, an engine with --api-key)")
	fs.BoolVar(&o.Room, "room", false, `add "bootstrap_room" to every body, to measure a PD engine directly (balancers replace it)`)
	if err := fs.Parse(args); err != nil {
		return &exitError{2, err}
	}
	o.Targets = splitList(*targets)
	var err error
	if *inLen != "" {
		if o.InputLen, err = load.ParseDist(*inLen); err != nil {
			return &exitError{2, fmt.Errorf("bench: --input-len: %w", err)}
		}
	}
	if *turns != "" {
		if o.Turns, err = load.ParseDist(*turns); err != nil {
			return &exitError{2, fmt.Errorf("bench: --turns: %w", err)}
		}
	}
	if o.OutputLen, err = load.ParseDist(*outLen); err != nil {
		return &exitError{2, fmt.Errorf("bench: --output-len: %w", err)}
	}
	for _, p := range splitList(*pids) {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return &exitError{2, fmt.Errorf("bench: --pid-of-target %q: not a number", p)}
		}
		o.PIDs = append(o.PIDs, pid)
	}
	if !*quiet {
		o.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := load.Run(ctx, o)
	if err != nil {
		return &exitError{2, fmt.Errorf("bench: %w", err)}
	}
	rep.WriteTable(os.Stdout)
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := rep.WriteJSON(f); err != nil {
			return err
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
