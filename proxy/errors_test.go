package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestUpstreamErrorDecisions: what the client is answered, whether another
// pair may be tried and whether the breaker counts it, per failure.
func TestUpstreamErrorDecisions(t *testing.T) {
	for _, tc := range []struct {
		kind      Kind
		status    int
		client    int
		retryable bool
		failure   bool
	}{
		{KindConnect, 0, 502, true, true},
		{KindTimeout, 0, 504, true, true},
		{KindProtocol, 0, 502, false, true},
		{KindCancelled, 0, 502, false, false},
		{KindStatus, 400, 400, false, false},
		{KindStatus, 404, 404, false, false},
		{KindStatus, 429, 429, false, false},
		{KindStatus, 499, 499, false, false},
		{KindStatus, 500, 502, false, true},
		{KindStatus, 501, 502, false, true},
		{KindStatus, 502, 502, true, true},
		{KindStatus, 503, 502, true, true},
		{KindStatus, 504, 502, true, true},
	} {
		t.Run(fmt.Sprintf("%s %d", tc.kind, tc.status), func(t *testing.T) {
			e := &UpstreamError{Backend: &Backend{URL: "http://d:1", Role: Decode}, Kind: tc.kind, Status: tc.status}
			if got := e.ClientStatus(); got != tc.client {
				t.Errorf("ClientStatus %d, want %d", got, tc.client)
			}
			if got := e.Retryable(); got != tc.retryable {
				t.Errorf("Retryable %v, want %v", got, tc.retryable)
			}
			if got := e.CountsAsFailure(); got != tc.failure {
				t.Errorf("CountsAsFailure %v, want %v", got, tc.failure)
			}
		})
	}
}

// TestUpstreamErrorNamesRoleAndURL: the message a client and the log see
// names the backend and says what happened, down to the root cause.
func TestUpstreamErrorNamesRoleAndURL(t *testing.T) {
	p := &Backend{URL: "http://10.0.0.1:30000", Role: Prefill}
	d := &Backend{URL: "http://[::1]:30001", Role: Decode}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	long := strings.Repeat("x", 600)
	for _, tc := range []struct {
		name string
		err  *UpstreamError
		want string
	}{
		{"status with body", &UpstreamError{Backend: p, Kind: KindStatus, Status: 503, Body: []byte(`{"error":"busy"}`)},
			`prefill http://10.0.0.1:30000 answered 503: {"error":"busy"}`},
		{"status without body", &UpstreamError{Backend: d, Kind: KindStatus, Status: 500},
			"decode http://[::1]:30001 answered 500"},
		{"long body capped at 512 bytes", &UpstreamError{Backend: d, Kind: KindStatus, Status: 500, Body: []byte(long)},
			"decode http://[::1]:30001 answered 500: " + long[:512]},
		{"timeout", &UpstreamError{Backend: d, Kind: KindTimeout, Err: fmt.Errorf("read: %w", os.ErrDeadlineExceeded)},
			"decode http://[::1]:30001 timed out: i/o timeout"},
		{"connect: the root cause", &UpstreamError{Backend: p, Kind: KindConnect, Err: refused},
			"prefill http://10.0.0.1:30000 connect: connection refused"},
		{"protocol", &UpstreamError{Backend: d, Kind: KindProtocol, Err: io.ErrUnexpectedEOF},
			"decode http://[::1]:30001 protocol: unexpected EOF"},
		{"cancelled without a cause", &UpstreamError{Backend: d, Kind: KindCancelled},
			"decode http://[::1]:30001 cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error()\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestUpstreamErrorUnwraps: errors.Is sees through to the leg's cause (the
// router tells a departed client from a failed backend this way).
func TestUpstreamErrorUnwraps(t *testing.T) {
	e := &UpstreamError{Backend: &Backend{URL: "http://d:1", Role: Decode}, Kind: KindCancelled, Err: ErrClientGone}
	if !errors.Is(e, ErrClientGone) {
		t.Fatal("errors.Is(err, ErrClientGone) is false")
	}
}

// TestClassifyReadErrors: a deadline is a timeout, anything else a broken
// answer.
func TestClassifyReadErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Kind
	}{
		{os.ErrDeadlineExceeded, KindTimeout},
		{fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded), KindTimeout},
		{fasthttp.ErrTimeout, KindTimeout},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, KindTimeout},
		{io.ErrUnexpectedEOF, KindProtocol},
		{syscall.ECONNRESET, KindProtocol},
		{errors.New("cannot parse response status line"), KindProtocol},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
