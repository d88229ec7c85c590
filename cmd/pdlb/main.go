// Command pdlb is a load balancer for prefill/decode disaggregated LLM
// serving: `pdlb serve`, `pdlb demo`, `pdlb mock`, `pdlb sim`, `pdlb bench`,
// `pdlb check-config FILE`, `pdlb version`.
package main

import (
	"errors"
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `pdlb — a load balancer for prefill/decode disaggregated LLM serving

Usage:
  pdlb serve [-c FILE] [--prefill URL [PORT|none]]... [--decode URL]... [--host H] [--port N] [--set key=value]...
  pdlb demo                      run mock engines and pdlb on the embedded config.yaml
  pdlb mock --role prefill|decode --port N [--fast] [--token-delay D] [--output-len N]
            [--dp N --tp N --bootstrap URL --register-delay D --fail-fast] [fault flags; see pdlb mock -h]
  pdlb sim [--prefill N --decode M --base-port P --stats-port S] [model flags; see pdlb sim -h]
                                 a simulated cluster: N prefill + M decode engines with KV caches
  pdlb bench [flags]             load generator (see pdlb bench -h)
  pdlb check-config FILE         validate a config file and exit
  pdlb version
`

// exitError carries a process exit code (2: bad configuration or usage).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	if err := run(os.Args[1:]); err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		fmt.Fprintln(os.Stderr, "pdlb:", err)
		os.Exit(code)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return &exitError{2, errors.New("no command given")}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return serve(rest)
	case "demo":
		return demo(rest)
	case "mock":
		return mockCmd(rest)
	case "sim":
		return simCmd(rest)
	case "bench":
		return benchCmd(rest)
	case "check-config":
		return checkConfig(rest)
	case "version", "--version":
		fmt.Println("pdlb", version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return &exitError{2, fmt.Errorf("unknown command %q", cmd)}
}
