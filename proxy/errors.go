package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Kind says how an upstream leg failed; it decides the client status and
// whether a retry or the breaker should care.
type Kind uint8

const (
	// KindConnect: the backend could not be reached (dial or write failed).
	KindConnect Kind = iota + 1
	// KindTimeout: a leg deadline passed.
	KindTimeout
	// KindStatus: the backend answered with a non-2xx status.
	KindStatus
	// KindProtocol: the backend answered something that is not HTTP or broke off mid-body.
	KindProtocol
	// KindCancelled: pdlb closed the leg itself (sibling failed, client left).
	KindCancelled
)

func (k Kind) String() string {
	switch k {
	case KindConnect:
		return "connect"
	case KindTimeout:
		return "timeout"
	case KindStatus:
		return "status"
	case KindProtocol:
		return "protocol"
	case KindCancelled:
		return "cancelled"
	}
	return "unknown"
}

// UpstreamError is a failed leg: which backend, how, and what it said.
type UpstreamError struct {
	Backend *Backend
	Kind    Kind
	// Status and Body are set for KindStatus (Body is the backend's answer, capped).
	Status      int
	Body        []byte
	ContentType []byte
	// RetryAfter is the backend's Retry-After header, if it sent one.
	RetryAfter []byte
	Err        error
	// AfterPrefill marks a decode stream that timed out before its first
	// event although its prefill had answered 200: it waited for KV that
	// did not come, which may be the pair's fault (router: pair health).
	AfterPrefill bool
}

func (e *UpstreamError) Error() string {
	who := e.Backend.Role.String() + " " + e.Backend.URL
	switch e.Kind {
	case KindStatus:
		msg := who + " answered " + strconv.Itoa(e.Status)
		if len(e.Body) > 0 {
			msg += ": " + string(capBytes(e.Body, 512))
		}
		if e.AuthRefused() {
			msg += " (the engine refused pdlb's credentials: upstream_auth.api_key and admin_api_key must be the engines' --api-key and --admin-api-key)"
		}
		return msg
	case KindTimeout:
		return who + " timed out: " + rootCause(e.Err).Error()
	}
	if e.Err != nil {
		return fmt.Sprintf("%s %s: %v", who, e.Kind, rootCause(e.Err))
	}
	return who + " " + e.Kind.String()
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// AuthRefused reports whether the engine refused pdlb's credentials (401):
// SGLang answers it from its API-key check only, before the request
// reaches the model, and the client's own Authorization never reaches an
// engine, so it is pdlb's configuration's fault, never the client's. (A
// 403 is not: SGLang sends it only on routes pdlb does not call, and one
// from something in front of the engines may depend on what the client
// sent, which must not open breakers.)
func (e *UpstreamError) AuthRefused() bool {
	return e.Kind == KindStatus && e.Status == 401
}

// ClientStatus is the status pdlb answers with: a backend's 4xx is the
// client's fault and goes through as is, but for a refusal of pdlb's
// credentials; timeouts are 504; the rest is 502.
func (e *UpstreamError) ClientStatus() int {
	switch {
	case e.AuthRefused():
		return 502
	case e.Kind == KindStatus && e.Status >= 400 && e.Status < 500:
		return e.Status
	case e.Kind == KindTimeout:
		return 504
	}
	return 502
}

// Retryable reports whether another pair might succeed: nothing reached the
// backend's application (or its API-key check refused it), it said it is
// unavailable, or its KV never arrived (a pair fault: the decode generated
// nothing).
func (e *UpstreamError) Retryable() bool {
	if e.PairFault() || e.AuthRefused() {
		return true
	}
	switch e.Kind {
	case KindConnect, KindTimeout:
		return true
	case KindStatus:
		return e.Status == 502 || e.Status == 503 || e.Status == 504
	}
	return false
}

// CountsAsFailure reports whether the backend's breaker should count it:
// 4xx are the client's fault and never count, but for a refusal of pdlb's
// credentials (an engine restarted with another key serves nobody through
// pdlb, while its open /health says it is well); pdlb's own cancellations
// neither; nor a pair fault, which belongs to the pairing (router: pair
// health), not to the decode.
func (e *UpstreamError) CountsAsFailure() bool {
	switch e.Kind {
	case KindStatus:
		return (e.Status >= 500 || e.AuthRefused()) && !e.PairFault()
	case KindCancelled:
		return false
	}
	return true
}

// pairFaultMarkers are what SGLang's decode says when the KV of a request
// could not come from its prefill (disaggregation/decode.py and the KV
// receivers: the handshake with the prefill's bootstrap server, the
// transfer itself, the heartbeat to the prefill), in the message of the 500
// it answers. Each names the pairing, not the decode alone: the same decode
// serves other prefills.
var pairFaultMarkers = [][]byte{
	[]byte("KVTransferError"),
	[]byte("Decode transfer failed"),
	[]byte("Decode handshake failed"),
	[]byte("Lost connection with prefill instance"),
	[]byte("Failed to get kvcache from prefill"),
	[]byte("Could not fetch bootstrap info"),
	[]byte("is healthy before, but now it is down"),
}

// PairFault reports whether a decode's failure belongs to its pairing with
// the prefill: a 5xx whose message is one of SGLang's KV-transfer or
// handshake errors. Only failures read it, never a successful leg. (A
// decode stream that timed out after its prefill answered, AfterPrefill,
// may be the pair's fault too, or the decode's: pair health counts it
// against the pair, and the decode's breaker counts it as well.)
func (e *UpstreamError) PairFault() bool {
	if e.Kind != KindStatus || e.Status < 500 || e.Backend == nil || e.Backend.Role != Decode {
		return false
	}
	for _, m := range pairFaultMarkers {
		if bytes.Contains(e.Body, m) {
			return true
		}
	}
	return false
}

func classify(err error) Kind {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) {
		return KindTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return KindTimeout
	}
	return KindProtocol
}

// rootCause unwraps to the innermost error so logs say "connection refused"
// rather than the wrapper around it.
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

func capBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
