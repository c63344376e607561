package worker_test

// The chaos run's receiver: one endpoint per subscriber on 127.0.0.1 (a
// port each, so that each is a destination of its own to the workers'
// connection pools), each with its behaviour, recording what the run
// checks: every request (its event, its arrival on the wall clock, its
// answer), the requests in flight at once, and the Retry-After deadlines
// it gave and any request that came before one.

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// chaosKind is an endpoint's behaviour.
type chaosKind string

const (
	kindFast chaosKind = "fast" // 200 at once
	kindSlow chaosKind = "slow" // 200 after the endpoint's delay (a request cut meanwhile ends at once)
	// kindEnforcing keeps its own token bucket, slower than the limit the
	// subscriber is registered with, and answers 429 with Retry-After when
	// it is dry. It is strict, not banning: a request before its deadline
	// is counted early and answered 429 again with the time left.
	kindEnforcing chaosKind = "rate-enforcing"
	kindBursts    chaosKind = "503-bursts" // 503 (no Retry-After: a counted failure) during a burst, else 200
	kindResets    chaosKind = "resets"     // a share of connections closed with a reset and no answer, else 200
)

// chaosEndpoint is one subscriber's endpoint.
type chaosEndpoint struct {
	id              string
	kind            chaosKind
	maxInFlight     int           // the subscriber's max_in_flight: more at once at the receiver is a broken limit
	delay           time.Duration // kindSlow
	rate            float64       // kindEnforcing: its own bucket (per second)
	burst           float64
	retryAfter      int           // kindEnforcing: the seconds a 429 asks for
	every, burstFor time.Duration // kindBursts: a burst of 503s lasting burstFor, every every
	phase           time.Duration
	resetShare      float64 // kindResets

	srv   *httptest.Server
	start time.Time

	mu       sync.Mutex
	rng      *rand.Rand
	inFlight int
	most     int      // the most requests in flight at once
	over     []string // requests that arrived with more than maxInFlight in flight
	hits     []chaosHit
	tokens   float64
	refilled time.Time
	deadline time.Time // the latest Retry-After deadline given, on the wall clock
	given    int       // Retry-After deadlines given for a dry bucket
	early    []string  // requests before a deadline given
}

// chaosHit is one request an endpoint received.
type chaosHit struct {
	event  string // webhook-id
	at     time.Time
	status int // the answer; 0: the connection was reset
}

func (h chaosHit) accepted() bool { return h.status/100 == 2 }

// serve starts the endpoint; it stops when the test ends.
func (e *chaosEndpoint) serve(t testing.TB, seed uint64) {
	// each endpoint its own stream: seeded by its id, not its id's length
	// (the six resets endpoints' ids are of one length, so they shared a
	// stream, and a seed whose first 24 draws missed 15% reset none)
	id := fnv.New64a()
	_, _ = id.Write([]byte(e.id))
	e.rng = rand.New(rand.NewPCG(seed, id.Sum64()))
	e.start, e.refilled, e.tokens = time.Now(), time.Now(), e.burst
	e.srv = httptest.NewServer(e)
	t.Cleanup(e.srv.Close)
}

func (e *chaosEndpoint) URL() string { return e.srv.URL + "/hooks/" + e.id }

func (e *chaosEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The whole body first: the server then watches the connection, so a
	// request whose worker was killed ends here at once (its context).
	_, _ = io.Copy(io.Discard, r.Body)
	// The wall clock, as hooklane's deadlines (Redis' TIME): a reading on
	// the monotonic clock would count the Retry-After on another clock.
	now := time.Now().Round(0)
	id := r.Header.Get("webhook-id")
	e.mu.Lock()
	e.inFlight++
	e.most = max(e.most, e.inFlight)
	if e.inFlight > e.maxInFlight {
		e.over = append(e.over, fmt.Sprintf("%s at %s: %d in flight", id, now.Format("15:04:05.000"), e.inFlight))
	}
	status, retryAfter := e.decide(now, id)
	e.hits = append(e.hits, chaosHit{event: id, at: now, status: status})
	e.mu.Unlock()
	// Out of flight before the answer leaves (the server writes it after
	// the handler returns), so the worker's next request never meets this
	// one still counted.
	done := func() {
		e.mu.Lock()
		e.inFlight--
		e.mu.Unlock()
	}
	if status == 0 {
		done()
		resetConn(w)
		return
	}
	if e.kind == kindSlow {
		tm := time.NewTimer(e.delay)
		select {
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
		}
	}
	done()
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
}

// decide picks the answer to a request arriving at now; e.mu is held.
func (e *chaosEndpoint) decide(now time.Time, id string) (int, string) {
	switch e.kind {
	case kindEnforcing:
		if left := e.deadline.Sub(now); left > 0 {
			e.early = append(e.early, fmt.Sprintf("%s at %s, %.3fs before the deadline", id, now.Format("15:04:05.000"), left.Seconds()))
			return http.StatusTooManyRequests, strconv.Itoa(int(math.Ceil(left.Seconds())))
		}
		e.tokens = math.Min(e.burst, e.tokens+now.Sub(e.refilled).Seconds()*e.rate)
		e.refilled = now
		if e.tokens >= 1 {
			e.tokens--
			return http.StatusOK, ""
		}
		e.deadline = now.Add(time.Duration(e.retryAfter) * time.Second)
		e.given++
		return http.StatusTooManyRequests, strconv.Itoa(e.retryAfter)
	case kindBursts:
		if (now.Sub(e.start)+e.phase)%e.every < e.burstFor {
			return http.StatusServiceUnavailable, ""
		}
	case kindResets:
		if e.rng.Float64() < e.resetShare {
			return 0, ""
		}
	}
	return http.StatusOK, ""
}

// resetConn closes the connection with a reset and no answer, as a
// crashed proxy does.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}

// chaosTally is what one endpoint saw, read after the run.
type chaosTally struct {
	hits         []chaosHit
	most         int
	over, early  []string
	given        int
	lastDeadline time.Time
	inFlight     int
}

func (e *chaosEndpoint) tally() chaosTally {
	e.mu.Lock()
	defer e.mu.Unlock()
	return chaosTally{hits: append([]chaosHit(nil), e.hits...), most: e.most, over: append([]string(nil), e.over...),
		early: append([]string(nil), e.early...), given: e.given, lastDeadline: e.deadline, inFlight: e.inFlight}
}
