package proxy

import "time"

// LegReport is what one leg of a traced attempt did: the facts a leg's
// span records, gathered where the leg runs so the proxy itself knows
// nothing of tracing.
type LegReport struct {
	Role Role
	// Status is the engine's HTTP status; 0 when no answer head arrived.
	Status int
	// Bytes is the body's length; for a stream, the bytes of the events read
	// (prefill) or relayed to the client (decode).
	Bytes int
	// Events counts the SSE events of a stream.
	Events int
	// FirstByte is when the answer's first byte counted as arrived: the whole
	// body for a non-streamed answer, the first event for a stream; zero when
	// it never did.
	FirstByte time.Time
	// End is when the leg ended.
	End time.Time
	// Err is why the leg failed; nil when it ended cleanly.
	Err *UpstreamError
}

// LegTracer receives the report of each leg of one attempt, exactly once
// per leg, as the leg ends (the two legs end on different goroutines).
type LegTracer interface {
	LegDone(LegReport)
}

// report hands a leg's report to the attempt's tracer, if it has one.
func (a *attempt) report(l *leg, role Role, first time.Time, bytes, events int, err *UpstreamError) {
	t := a.x.Tracer
	if t == nil {
		return
	}
	// fasthttp reports 200 for a head never read, so a failed leg has a
	// status only when the failure was its status.
	status := 0
	switch {
	case err == nil:
		status = l.status()
	case err.Kind == KindStatus:
		status = err.Status
	}
	t.LegDone(LegReport{Role: role, Status: status, Bytes: bytes, Events: events, FirstByte: first, End: a.p.now(), Err: err})
}

// stamp is the time now when the attempt is traced, else zero: an
// untraced request does not read the clock for it.
func (a *attempt) stamp() time.Time {
	if a.x.Tracer == nil {
		return time.Time{}
	}
	return a.p.now()
}
