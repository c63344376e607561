package worker_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/worker"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// flaky is an endpoint on 127.0.0.1 that, while down, resets the
// connection of every request it gets (what a crashed backend behind a
// load balancer looks like), and otherwise answers 200.
type flaky struct {
	*testkit.Sink
	down atomic.Bool
	// hold, when given, keeps the requests that arrive while down until
	// it is closed, then resets them together.
	hold chan struct{}
}

// newFlaky starts the endpoint, up; a hold given is its hold.
func newFlaky(t *testing.T, hold ...chan struct{}) *flaky {
	f := &flaky{}
	if len(hold) > 0 {
		f.hold = hold[0] // set before the server starts: its handlers read it
	}
	f.Sink = testkit.NewReceiver(t, func(w http.ResponseWriter, r *http.Request, _ string) bool {
		if !f.down.Load() {
			return true
		}
		if f.hold != nil {
			select {
			case <-f.hold:
			case <-r.Context().Done():
			}
		}
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			c.(*net.TCPConn).SetLinger(0) // RST, not FIN
			c.Close()
		}
		return false
	})
	return f
}

// delivered returns when each event was first accepted.
func (f *flaky) delivered() map[string]time.Time {
	out := map[string]time.Time{}
	for _, a := range f.Got() {
		if _, ok := out[a.ID]; a.Accepted && !ok {
			out[a.ID] = a.At
		}
	}
	return out
}

// An outage shorter than the events' horizon dead-letters nothing, however
// many events wait behind it: with the probe gap at its cap (500ms) and a
// 10s horizon, 100 events (five times horizon ÷ gap) wait out a 3s outage
// and are all delivered after it (2s at the subscriber's 50/s), at the
// subscriber's rate. Holding spends
// no attempt, nor does probing: with max_attempts 2, an event held after
// its first failure, or probed twice, would die if either did.
// HOOKLANE_TEST_OUTAGE=40s runs issue 11's size (200 events, a 24h horizon,
// the default probe gaps) in a real worker process.
func TestOutageShorterThanTheHorizonDeadLettersNothing(t *testing.T) {
	n, outage, horizon := 100, 3*time.Second, 10*time.Second
	cfg := worker.Config{BackoffBase: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Breaker: limits.BreakerPolicy{ProbeGap: 200 * time.Millisecond, MaxProbeGap: 500 * time.Millisecond, Ramp: 500 * time.Millisecond}}
	var b *bundle
	if v := os.Getenv("HOOKLANE_TEST_OUTAGE"); v != "" {
		var err error
		if outage, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
		n, horizon = 200, 24*time.Hour
		b = procBundle(t)
	} else {
		t.Parallel()
		b = setup(t, cfg)
	}
	const rate, inFlight = 50, 10
	// The first requests fail together once every event is published: a
	// delivery whose two attempts both fail before the fifth failure in a
	// row opens the breaker dies by its attempts (MaxAttempts 2), whatever
	// the horizon, and a publish loop slowed by a busy host let e000's
	// retry go before four more had failed (e000 dead in make test).
	hold := make(chan struct{})
	f := newFlaky(t, hold)
	f.down.Store(true)
	b.put(t, tasks.Subscriber{ID: "s", URL: f.URL, MaxAttempts: 2, MaxInFlight: inFlight, RetryHorizon: tasks.Duration(horizon),
		Limit: limits.Limit{Rate: rate, Burst: 10, Period: time.Second}})
	start := time.Now()
	for i := range n {
		if r := b.publish(t, fmt.Sprintf("e%03d", i), "t"); !r.Targets[0].Outcome.Booked() {
			t.Fatalf("publish: %s", r.Targets[0].Outcome)
		}
	}
	close(hold)
	testkit.Eventually(t, outage, "the breaker open", func() bool { return breakerOf(t, b.rdb, b.ns, "s").State != "closed" })
	time.Sleep(time.Until(start.Add(outage))) // the rest of the outage: nothing to poll for
	f.down.Store(false)
	up := time.Now()
	if !testkit.Poll(45*time.Second, func() bool { return len(f.delivered()) == n }) {
		got, missing := f.delivered(), ""
		for i := range n {
			if ev := fmt.Sprintf("e%03d", i); got[ev].IsZero() {
				missing += fmt.Sprintf("%s %v; ", ev, b.rdb.HGetAll(context.Background(), tasks.Keys(b.ns).Delivery("s", ev)).Val())
			}
		}
		t.Fatalf("%d of %d delivered 45 s after the outage; not: %s; left to run: %s", len(got), n, missing, testkit.Leftover(context.Background(), b.rdb, b.insp, b.ns))
	}
	var during, after []testkit.Arrival
	for _, a := range f.Got() {
		if a.At.Before(up) {
			during = append(during, a)
		} else {
			after = append(after, a)
		}
	}
	var lastAt time.Time
	for _, at := range f.delivered() {
		if at.After(lastAt) {
			lastAt = at
		}
	}
	t.Logf("outage %s: %d requests during it, all %d delivered %.1fs after it ended", outage, len(during), n, lastAt.Sub(up).Seconds())
	if d := b.dead(t, producer.DeadLetterQuery{}); len(d) != 0 || b.deadCount(t, "s") != 0 {
		t.Fatalf("%d dead letters (first: %+v); want none", len(d), d)
	}
	// Before it opens, the requests in flight fail together (up to
	// inFlight); then one probe at a time, at least a gap apart.
	if limit := inFlight + int(outage/(200*time.Millisecond)) + 1; len(during) > limit {
		t.Errorf("%d requests during a %s outage; want at most %d", len(during), outage, limit)
	}
	withinLimit(t, after, rate, 10, 50*time.Millisecond)
	if lastAt.Sub(up) > 30*time.Second {
		t.Errorf("the last event arrived %s after the outage ended; want within 30s", lastAt.Sub(up))
	}
}

// TestFlappingEndpointNeitherDeadLettersNorGetsMoreThanItsLimit: up
// 0.5s, down 1s (the breaker opens, probes after its 1s gap), three times
// over, then up for good; the slow start after each close lasts 2s.
func TestFlappingEndpointNeitherDeadLettersNorGetsMoreThanItsLimit(t *testing.T) {
	const n, rate, burst = 100, 40, 5
	b := procBundle(t, "HOOKLANE_BREAKER_RAMP=2s")
	f := newFlaky(t)
	b.put(t, tasks.Subscriber{ID: "s", URL: f.URL, MaxAttempts: 5, MaxInFlight: 5,
		Limit: limits.Limit{Rate: rate, Burst: burst, Period: time.Second}})
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	for range 3 { // the flapping itself: sleeps are the scenario, not waits for a result
		time.Sleep(500 * time.Millisecond)
		f.down.Store(true)
		time.Sleep(time.Second)
		f.down.Store(false)
	}
	testkit.Eventually(t, 60*time.Second, "all delivered once the flapping stopped", func() bool { return len(f.delivered()) == n })
	a := f.Got()
	t.Logf("%d requests for %d events", len(a), n)
	withinLimit(t, a, rate, burst, 50*time.Millisecond)
	if d := b.dead(t, producer.DeadLetterQuery{}); len(d) != 0 || b.deadCount(t, "s") != 0 {
		t.Errorf("%d dead letters (first: %+v); want none", len(d), d)
	}
}

// Waiting spends no attempt, whatever it waits for: with max_attempts 1,
// an event is paused and resumed, answered 429 with a Retry-After three
// times, and made the open breaker's probe many times over (two events,
// an outage of a dozen probes); each is delivered in the end, its record
// saying none of its attempts was spent before the request that
// delivered it.
func TestWaitingSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{Breaker: limits.BreakerPolicy{Failures: 1, ProbeGap: 100 * time.Millisecond, MaxProbeGap: 200 * time.Millisecond,
		Ramp: 100 * time.Millisecond}})
	ctx := context.Background()
	var throttled atomic.Int64
	angry := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if throttled.Add(1) <= 3 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	b.put(t, tasks.Subscriber{ID: "angry", URL: angry.URL, MaxAttempts: 1, EventTypes: []string{"a"}})
	b.put(t, tasks.Subscriber{ID: "paused", URL: angry.URL, MaxAttempts: 1, EventTypes: []string{"p"}, Paused: true})
	f := newFlaky(t)
	f.down.Store(true)
	b.put(t, tasks.Subscriber{ID: "down", URL: f.URL, MaxAttempts: 1, EventTypes: []string{"d"}})
	b.publish(t, "opener", "d") // its failure (its one attempt) opens the breaker
	testkit.Eventually(t, 10*time.Second, "the breaker open", func() bool { return breakerOf(t, b.rdb, b.ns, "down").State != "closed" })
	b.publish(t, "d1", "d")
	b.publish(t, "d2", "d")
	b.publish(t, "a1", "a")
	b.publish(t, "p1", "p")
	testkit.Eventually(t, 10*time.Second, "a dozen probes", func() bool { return f.Count() >= 13 })
	f.down.Store(false)
	if err := b.p.SetPaused(ctx, "paused", false); err != nil {
		t.Fatal(err)
	}
	for sub, ev := range map[string]string{"down": "d1", "down ": "d2", "angry": "a1", "paused": "p1"} {
		testkit.Eventually(t, 10*time.Second, ev+" delivered", func() bool {
			d, err := b.p.GetDelivery(ctx, strings.TrimSpace(sub), ev)
			return err == nil && d.State == tasks.StateDelivered
		})
		d, _ := b.p.GetDelivery(ctx, strings.TrimSpace(sub), ev)
		if last := d.Attempts[len(d.Attempts)-1]; last.AttemptsSpent != 0 || d.AttemptsSpent != 1 {
			t.Errorf("%s: %d attempts spent before its delivering request, %d in all after it; want 0 and 1 (%d requests)",
				ev, last.AttemptsSpent, d.AttemptsSpent, d.AttemptCount)
		}
	}
	if d := b.dead(t, producer.DeadLetterQuery{}); len(d) != 1 || d[0].TaskID != "down:opener" {
		t.Fatalf("dead letters %+v; want only the opener's (it spent its one attempt)", d)
	}
}
