package proxy

import "time"

// LegObserver hears, on the request path, what each leg to a backend did:
// router.Metrics records it as the per-backend request and TTFT series.
// Its methods run on the request's goroutines: they must neither block
// nor allocate.
type LegObserver interface {
	// LegAnswered reports how long b took to answer a leg, from sending
	// the request: for a decode its first byte (the whole answer when not
	// streaming, the first event of a stream), for a prefill the whole leg
	// (its answer, streamed or not, read to the end). Failed legs are not
	// reported here.
	LegAnswered(b *Backend, d time.Duration)
	// LegDone reports how a leg to b ended, as its breaker is told: nil is
	// success; a backend's 4xx is an *UpstreamError of KindStatus; a leg
	// pdlb cut itself is KindCancelled.
	LegDone(b *Backend, err *UpstreamError)
}

// SetObserver sets who hears about every leg (nil: nobody). Call it before
// serving.
func (p *Proxy) SetObserver(o LegObserver) { p.obs = o }

// settle reports a leg's outcome to its ticket (in-flight count, breaker)
// and to the observer.
func (p *Proxy) settle(t Ticket, err *UpstreamError) {
	t.Done(err)
	if p.obs != nil && t.b != nil {
		p.obs.LegDone(t.b, err)
	}
}

// answered reports a leg's answer time to the observer.
func (p *Proxy) answered(b *Backend, start time.Time) {
	if p.obs != nil {
		p.obs.LegAnswered(b, p.now().Sub(start))
	}
}
