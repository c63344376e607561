package web

import (
	"net/http"
	"sync/atomic"
	"time"
)

// publishPlaces bounds the publishes one web process serves at once
// (Config.MaxPublishes). A publish takes a place once its body is read,
// before the ingest limiter's round trip, and gives it back when it is
// answered; with every place taken it is answered 503 "overloaded" at
// once, with a Retry-After, having written nothing.
//
// Why: past what the host serves (seed 003's spike beside a worker on the
// same cores) every publish waited for a pooled Redis connection behind
// all the others, and the waits grew for as long as the spike lasted:
// accepted publishes answered after 12 s at p99, and the stage after the
// spike, at the old rate, still waited 12 s. Bounded, an accepted publish
// waits for at most the places ahead of it, the rest are refused in
// microseconds (a client retries them after the Retry-After), and the
// process is back to its usual latency the moment the spike ends
// (deploy/BENCHMARKS.md, "The publish path under a spike").
type publishPlaces struct {
	slots chan struct{}
	shed  atomic.Int64 // all-time: 503s answered for want of a place
}

func newPublishPlaces(n int) *publishPlaces {
	return &publishPlaces{slots: make(chan struct{}, n)}
}

// take takes a place, and returns the function that gives it back; or
// the 503 to answer when every place is taken.
func (p *publishPlaces) take() (func(), error) {
	select {
	case p.slots <- struct{}{}:
		return func() { <-p.slots }, nil
	default:
		p.shed.Add(1)
		ae := apiErr(http.StatusServiceUnavailable, "overloaded", "",
			"this web process is serving %d publishes already (HOOKLANE_WEB_MAX_PUBLISHES); nothing was written: publish again after the Retry-After", cap(p.slots))
		ae.RetryAfter = time.Second
		return nil, ae
	}
}

// inProgress is how many publishes hold a place now.
func (p *publishPlaces) inProgress() int { return len(p.slots) }
