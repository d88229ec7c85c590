package proxytest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
)

// Ports a test reserves for something it starts later (a pdlb listener, an
// etcd member) come from below the kernel's ephemeral range (32768–60999 by
// Linux's default). A port the kernel handed out for ":0" and a test closed
// again is the next ":0" of any other test binary running in parallel, and
// every outgoing connection's local port is drawn from that range too: CI
// once saw etcd fail to bind a port found free a moment before. Nothing
// takes a port below the range unless asked for it by number. Where the
// range starts lower (some CI machines set 1024–65535) there is no such
// place, and the ports come from within it.
const reservedLow = 10000

var reservedHigh = func() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 32768
	}
	if low > reservedLow+1000 {
		return low
	}
	return max(high, reservedLow+1000)
}()

// FreePort returns a port below the ephemeral range that is free on every
// one of hosts (127.0.0.1 when none is named) at the time of the call.
func FreePort(t testing.TB, hosts ...string) int {
	t.Helper()
	return FreePorts(t, 1, hosts...)[0]
}

// FreePorts returns n distinct such ports.
func FreePorts(t testing.TB, n int, hosts ...string) []int {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	var out []int
	seen := map[int]bool{}
	for attempt := 0; len(out) < n; attempt++ {
		if attempt == 10000 {
			t.Fatalf("no free port in %d–%d on %v", reservedLow, reservedHigh-1, hosts)
		}
		port := reservedLow + rand.IntN(reservedHigh-reservedLow)
		if seen[port] {
			continue
		}
		seen[port] = true
		if freeOnAll(port, hosts) {
			out = append(out, port)
		}
	}
	return out
}

func freeOnAll(port int, hosts []string) bool {
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		held = append(held, ln)
	}
	return true
}

// ClosedAddr returns "127.0.0.1:port" for a port nothing listens on, to
// test refused connections: below the ephemeral range, so no other test's
// ":0" listener or outgoing connection takes it meanwhile.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
