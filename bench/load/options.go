package load

import (
	"errors"
	"fmt"
	"io"
	"time"

	"pdlb"
)

// Routes the load generator knows how to build bodies for.
const (
	RouteGenerate        = "/generate"
	RouteChatCompletions = "/v1/chat/completions"
	RouteCompletions     = "/v1/completions"
)

// Workloads: what the prompts look like (see Options.Workload).
const (
	WorkloadNone      = "none"
	WorkloadMultiturn = "multiturn"
	WorkloadShared    = "shared"
	WorkloadUnique    = "unique"
)

// Options describe one benchmark run. Zero values take the defaults noted per field.
type Options struct {
	// Targets are base URLs (http://127.0.0.1:8000); two or more run in interleaved rounds A B A B ….
	Targets []string
	// Route is the path requested on every target; default "/generate".
	Route string
	// Concurrency is the number of closed-loop workers, or the cap on outstanding
	// requests in open loop; default 64.
	Concurrency int
	// Rate > 0 switches to open loop: Poisson arrivals at Rate requests per second.
	Rate float64
	// Duration of each round; default 10s when Requests is 0 too. Exclusive with Requests.
	Duration time.Duration
	// Requests per round (closed loop: exactly this many are sent; open loop: scheduled).
	Requests int
	// Rounds per target; default 3 with several targets, else 1.
	Rounds int
	// Stream asks for SSE answers and measures TTFT and inter-token latency.
	Stream bool
	// InputLen is the prompt length in words (with a workload: a user message's); default 128
	// (multiturn: 64).
	InputLen Dist
	// OutputLen is max_new_tokens / max_tokens; default 128.
	OutputLen Dist
	// Timeout bounds each request, stream included; default 60s.
	Timeout time.Duration
	// PIDs per target (0 = none): CPU time and RSS of that process are sampled from /proc.
	PIDs []int
	// Progress receives a progress bar when it is a terminal; nil = none.
	Progress io.Writer
	// Seed makes prompts, lengths and arrivals reproducible; default 1.
	Seed int64
	// CAFile is a PEM file of CAs an https:// target's certificate must
	// chain to; empty trusts the system's pool.
	CAFile string
	// APIKey is sent as "Authorization: Bearer <key>" on every request: a
	// pdlb with server.api_key, an engine with --api-key (default "": none).
	APIKey string
	// Room adds a "bootstrap_room" to every body, so an engine can be
	// measured directly (a balancer replaces the field).
	Room bool

	// Workload shapes the prompts; default WorkloadNone, where request i's prompt is "r<i>"
	// and InputLen-1 filler words. The others send /generate with "text" (one prompt token
	// per word on the simulated engines), words that only repeat where the workload means
	// them to (an engine's prefix cache can hit on them), and user messages that start with
	// a word drawn from the round and the target, so that neither another round nor another
	// target on the same engines finds them cached:
	//   - WorkloadMultiturn: chat sessions. Turn k of a session sends its system prompt (one
	//     of SystemPrompts of SystemLen words, picked per session with Zipf popularity
	//     ZipfS), every earlier user message and the answer the engine gave to it (the
	//     "text" of the JSON answer or of the last SSE event), then a new user message of
	//     InputLen words: the history a chat client resends;
	//   - WorkloadShared: one of SystemPrompts system prompts of SystemLen words, picked
	//     with Zipf popularity ZipfS, then a user message of InputLen words;
	//   - WorkloadUnique: the control, a prompt of SystemLen+InputLen words that shares no
	//     word with any other from its first on, request by request as long as in shared.
	Workload string
	// SystemPrompts is the number of distinct system prompts; default 4 (multiturn), 16 (shared).
	SystemPrompts int
	// SystemLen is a system prompt's length in words; default 256 (multiturn), 1024 (shared, unique).
	SystemLen int
	// ZipfS is the exponent of the system prompts' popularity: rank k (1 = most popular)
	// is picked with probability proportional to 1/k^ZipfS; default 1.1.
	ZipfS float64
	// Sessions (multiturn) is the number of sessions open at once, each with at most one
	// request in flight: closed loop, a session that ends is replaced at once; open loop
	// (Rate: new sessions per second), an arrival that finds Sessions open is dropped.
	// Default 64; it takes Concurrency's place, which multiturn refuses.
	Sessions int
	// Turns (multiturn) is the number of requests of a session; default 6.
	Turns Dist
	// ThinkTime (multiturn) is the pause between an answer and the session's next turn; default 0.
	ThinkTime time.Duration

	// sleep waits out think time; default pdlb.SleepContext, tests replace it.
	sleep pdlb.SleepFunc
}

// withDefaults returns a copy with every zero field set to its documented default.
func (o Options) withDefaults() Options {
	if o.Route == "" {
		o.Route = RouteGenerate
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.Duration == 0 && o.Requests == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Rounds <= 0 {
		o.Rounds = 1
		if len(o.Targets) > 1 {
			o.Rounds = 3
		}
	}
	if o.Workload == "" {
		o.Workload = WorkloadNone
	}
	switch o.Workload {
	case WorkloadMultiturn:
		if o.Sessions <= 0 {
			o.Sessions = 64
		}
		o.Concurrency = o.Sessions // one request in flight per session
		if o.Turns == (Dist{}) {
			o.Turns = Dist{Min: 6, Max: 6}
		}
		if o.SystemPrompts <= 0 {
			o.SystemPrompts = 4
		}
		if o.SystemLen <= 0 {
			o.SystemLen = 256
		}
		if o.InputLen == (Dist{}) {
			o.InputLen = Dist{Min: 64, Max: 64}
		}
	case WorkloadShared, WorkloadUnique:
		if o.SystemPrompts <= 0 {
			o.SystemPrompts = 16
		}
		if o.SystemLen <= 0 {
			o.SystemLen = 1024
		}
	}
	if o.ZipfS == 0 && (o.Workload == WorkloadMultiturn || o.Workload == WorkloadShared) {
		o.ZipfS = 1.1
	}
	if o.sleep == nil {
		o.sleep = pdlb.SleepContext
	}
	if o.InputLen == (Dist{}) {
		o.InputLen = Dist{Min: 128, Max: 128}
	}
	if o.OutputLen == (Dist{}) {
		o.OutputLen = Dist{Min: 128, Max: 128}
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// checkWorkload refuses, before defaults hide what was set, a workload parameter that
// the chosen workload would ignore: a silently ignored flag is a run that measured
// something else than its command line says.
func (o Options) checkWorkload() error {
	if o.Workload != WorkloadMultiturn && (o.Sessions != 0 || o.Turns != (Dist{}) || o.ThinkTime != 0) {
		return errors.New("sessions, turns and think time need workload multiturn")
	}
	switch o.Workload {
	case "", WorkloadNone:
		if o.SystemPrompts != 0 || o.SystemLen != 0 || o.ZipfS != 0 {
			return errors.New("system prompts, system length and zipf exponent need a workload (multiturn, shared, unique)")
		}
		return nil
	case WorkloadMultiturn:
		if o.Concurrency != 0 {
			return errors.New("workload multiturn: sessions set the requests in flight (one per session), not concurrency")
		}
		if o.Sessions < 0 || o.ThinkTime < 0 {
			return errors.New("sessions and think time must not be negative")
		}
		if o.Turns != (Dist{}) && o.Turns.Min < 1 {
			return fmt.Errorf("turns %s: a session has at least 1 turn", o.Turns)
		}
	case WorkloadShared:
	case WorkloadUnique:
		if o.SystemPrompts != 0 || o.ZipfS != 0 {
			return errors.New("workload unique shares no system prompt: system prompts and zipf exponent do not apply")
		}
	default:
		return fmt.Errorf("workload %q: want %s, %s, %s or %s", o.Workload, WorkloadNone, WorkloadMultiturn, WorkloadShared, WorkloadUnique)
	}
	if o.Route != "" && o.Route != RouteGenerate {
		return fmt.Errorf("workload %s sends %s with \"text\" (route %s)", o.Workload, RouteGenerate, o.Route)
	}
	if o.SystemPrompts < 0 || o.SystemLen < 0 || o.ZipfS < 0 {
		return errors.New("system prompts, system length and zipf exponent must not be negative")
	}
	if o.InputLen != (Dist{}) && o.InputLen.Min < 1 {
		return fmt.Errorf("workload %s: input length %s: a user message has at least 1 word, the one that makes it unique", o.Workload, o.InputLen)
	}
	return nil
}

func (o Options) validate() error {
	if len(o.Targets) == 0 {
		return errors.New("targets: at least one URL is required")
	}
	switch o.Route {
	case RouteGenerate, RouteChatCompletions, RouteCompletions:
	default:
		return fmt.Errorf("route %q: want %s, %s or %s", o.Route, RouteGenerate, RouteChatCompletions, RouteCompletions)
	}
	if o.Duration > 0 && o.Requests > 0 {
		return errors.New("duration and requests: set one, not both")
	}
	if o.Duration < 0 || o.Requests < 0 || o.Rate < 0 {
		return errors.New("duration, requests and rate must not be negative")
	}
	if len(o.PIDs) != 0 && len(o.PIDs) != len(o.Targets) {
		return fmt.Errorf("pids: %d given for %d targets (use 0 for none)", len(o.PIDs), len(o.Targets))
	}
	return nil
}
