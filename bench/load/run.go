// Package load is the load generator behind `pdlb bench`: closed- and open-loop HTTP load
// against one or more targets in interleaved rounds, with latency, streaming and
// per-process CPU/RSS measurements.
package load

import (
	"context"
	"sync/atomic"
	"time"
)

// procSampleEvery is how often a target's RSS is sampled during a round.
const procSampleEvery = 100 * time.Millisecond

// Run applies the load described by opts to every target, rounds interleaved
// and rotated (A B C, B C A, C A B, …: each target goes first equally often,
// since one build measured 6 % apart depending on its place in the round),
// and reports per-round figures and their medians. When ctx ends, the rounds
// finished so far are reported together with ctx's error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.checkWorkload(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	targets := make([]*target, len(opts.Targets))
	for i, u := range opts.Targets {
		t, err := newTarget(u, opts.Route, opts)
		if err != nil {
			return nil, err
		}
		targets[i] = t
		defer t.close()
	}

	rep := &Report{
		Machine: thisMachine(),
		Config:  configOf(&opts),
		Started: time.Now().UTC().Truncate(time.Microsecond),
		Targets: make([]TargetReport, len(targets)),
	}
	for i, u := range opts.Targets {
		rep.Targets[i].URL = u
		if len(opts.PIDs) > 0 {
			rep.Targets[i].PID = opts.PIDs[i]
		}
	}

	ps := newPrompts(&opts)
	prog := newProgress(opts.Progress, &opts, len(targets))
	defer prog.finish()
	for round := 0; round < opts.Rounds && ctx.Err() == nil; round++ {
		// Every target gets the same seed in a round: the same prompts, lengths and arrivals
		// (with a workload, the same shapes; the words that make prompts unique are salted
		// per target, see Options.Workload).
		seed := uint64(opts.Seed) + uint64(round)*0x9e3779b97f4a7c15
		for k := range targets {
			if ctx.Err() != nil {
				break
			}
			i := (round + k) % len(targets)
			t := targets[i]
			prog.startRound(round, opts.Rounds, string(rune('A'+i%26)), t.base)
			plan := &roundPlan{opts: &opts, prompts: ps, seed: seed, salt: splitmix64(seed ^ splitmix64(uint64(i)))}
			r := runRound(ctx, t, plan, rep.Targets[i].PID, &prog.done)
			prog.endRound()
			rep.Targets[i].Rounds = append(rep.Targets[i].Rounds, newRoundAt(round, r))
			// Fresh connections per round, so no target inherits warm state from an earlier one.
			t.close()
		}
	}
	for i := range rep.Targets {
		rep.Targets[i].Median = medianRound(rep.Targets[i].Rounds)
	}
	return rep, ctx.Err()
}

// measured pairs a loop's samples with the process usage seen meanwhile.
type measured struct {
	loop  roundResult
	usage procUsage
}

func runRound(ctx context.Context, t *target, plan *roundPlan, pid int, done *atomic.Int64) measured {
	var watch *procWatch
	if pid > 0 {
		watch = watchProc(pid, procSampleEvery)
	}
	var m measured
	switch {
	case plan.opts.Workload == WorkloadMultiturn:
		m.loop = sessionLoop(ctx, t, plan, done)
	case plan.opts.Rate > 0:
		m.loop = openLoop(ctx, t, plan, done)
	default:
		m.loop = closedLoop(ctx, t, plan, done)
	}
	if watch != nil {
		m.usage = watch.end()
	}
	return m
}

func newRoundAt(index int, m measured) Round { return newRound(index, m.loop, m.usage) }

func configOf(o *Options) Config {
	c := Config{
		Route:       o.Route,
		Concurrency: o.Concurrency,
		Rate:        o.Rate,
		DurationS:   o.Duration.Seconds(),
		Requests:    o.Requests,
		Rounds:      o.Rounds,
		Stream:      o.Stream,
		InputLen:    o.InputLen,
		OutputLen:   o.OutputLen,
		TimeoutS:    o.Timeout.Seconds(),
		Seed:        o.Seed,
		ClockTicks:  clockTicks(),
		Workload:    o.Workload,
	}
	if o.Workload != WorkloadNone {
		c.SystemLen = o.SystemLen
	}
	if o.Workload == WorkloadShared || o.Workload == WorkloadMultiturn {
		c.SystemPrompts, c.ZipfS = o.SystemPrompts, o.ZipfS
	}
	if o.Workload == WorkloadMultiturn {
		c.Sessions, c.Turns, c.ThinkTimeS = o.Sessions, o.Turns, o.ThinkTime.Seconds()
	}
	return c
}
