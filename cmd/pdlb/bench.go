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
	fs.IntVar(&o.Concurrency, "concurrency", 64, "closed loop: requests in flight (open loop: cap on outstanding requests)")
	fs.Float64Var(&o.Rate, "rate", 0, "open loop: Poisson arrivals at this many requests/s (0: closed loop)")
	fs.DurationVar(&o.Duration, "duration", 0, "length of each round (default 10s unless --requests is set)")
	fs.IntVar(&o.Requests, "requests", 0, "requests per round instead of --duration")
	fs.IntVar(&o.Rounds, "rounds", 0, "rounds per target (default 3 with several targets, else 1)")
	fs.BoolVar(&o.Stream, "stream", false, "streaming requests (TTFT and inter-token latency are measured)")
	inLen := fs.String("input-len", "128", "prompt length in words: N or A-B (uniform)")
	outLen := fs.String("output-len", "128", "output tokens: N or A-B (uniform)")
	fs.DurationVar(&o.Timeout, "timeout", 60*time.Second, "per-request timeout")
	pids := fs.String("pid-of-target", "", "comma-separated PIDs, one per target (0: none): CPU-µs per request and peak RSS of that process")
	out := fs.String("out", "", "also write the full report as JSON to this file")
	fs.Int64Var(&o.Seed, "seed", 1, "seed for request shapes and arrivals")
	quiet := fs.Bool("quiet", false, "no progress bar")
	fs.BoolVar(&o.Room, "room", false, `add "bootstrap_room" to every body, to measure a PD engine directly (balancers replace it)`)
	if err := fs.Parse(args); err != nil {
		return &exitError{2, err}
	}
	o.Targets = splitList(*targets)
	var err error
	if o.InputLen, err = load.ParseDist(*inLen); err != nil {
		return &exitError{2, fmt.Errorf("bench: --input-len: %w", err)}
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
