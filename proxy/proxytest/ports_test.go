package proxytest

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, below the ephemeral range and free to bind.
func TestFreePorts(t *testing.T) {
	ports := FreePorts(t, 20)
	seen := map[int]bool{}
	for _, p := range ports {
		if p < reservedLow || p >= reservedHigh || seen[p] {
			t.Fatalf("port %d: out of %d–%d or twice in %v", p, reservedLow, reservedHigh-1, ports)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		defer ln.Close()
	}
}
