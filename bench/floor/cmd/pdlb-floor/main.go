// Command pdlb-floor runs the bare fan-out proxy that bench/run.sh measures pdlb against.
//
//	pdlb-floor -listen 127.0.0.1:8100 -prefill http://127.0.0.1:30000 -decode http://127.0.0.1:30001
package main

import (
	"flag"
	"fmt"
	"os"

	"pdlb/bench/floor"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8100", "address to serve on")
	prefill := flag.String("prefill", "http://127.0.0.1:30000", "prefill engine URL")
	decode := flag.String("decode", "http://127.0.0.1:30001", "decode engine URL")
	port := flag.Int("bootstrap-port", 8998, "bootstrap_port stamped into every request")
	flag.Parse()
	if err := floor.ListenAndServe(*listen, floor.New(*prefill, *decode, *port)); err != nil {
		fmt.Fprintln(os.Stderr, "pdlb-floor:", err)
		os.Exit(1)
	}
}
