package worker_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
}

func newFlaky(t *testing.T) *flaky {
	f := &flaky{}
	f.Sink = testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ string) bool {
		if !f.down.Load() {
			return true
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

// TestOutageShorterThanTheHorizonDeadLettersNothing is issue 11's case: an
// endpoint that resets every connection for a while, 200 events queued with
// max_attempts 5. The breaker holds them: about one request a second during
// the outage, no dead letter, and all delivered soon after it ends.
// A real worker process. HOOKLANE_TEST_OUTAGE=40s runs it at the issue's
// size (make test: 10s).
func TestOutageShorterThanTheHorizonDeadLettersNothing(t *testing.T) {
	outage := 10 * time.Second
	if v := os.Getenv("HOOKLANE_TEST_OUTAGE"); v != "" {
		var err error
		if outage, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	const n, inFlight = 200, 10
	b := procBundle(t)
	f := newFlaky(t)
	f.down.Store(true)
	b.put(t, tasks.Subscriber{ID: "s", URL: f.URL, MaxAttempts: 5, MaxInFlight: inFlight,
		Limit: limits.Limit{Rate: 50, Burst: 10, Period: time.Second}})
	for i := range n {
		if r := b.publish(t, fmt.Sprintf("e%03d", i), "t"); r.Targets[0].Outcome != producer.Enqueued {
			t.Fatalf("publish: %s", r.Targets[0].Outcome)
		}
	}
	start := time.Now()
	// asynqmon shows a held task's reason: the breaker.
	testkit.Eventually(t, outage, "a task held by the breaker, saying so", func() bool {
		for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
			held, err := b.insp.ListRetryTasks(tasks.Keys(b.ns).ShardQueue("", lane, 0))
			if err == nil && len(held) > 0 && strings.Contains(held[0].LastErr, "circuit breaker open") {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Until(start.Add(outage))) // the rest of the outage: nothing to poll for
	f.down.Store(false)
	up := time.Now()
	testkit.Eventually(t, 45*time.Second, "all 200 delivered after the outage", func() bool { return len(f.delivered()) == n })
	var during, last int
	var lastAt time.Time
	for _, a := range f.Got() {
		if a.At.Before(up) {
			during++
		}
	}
	for _, at := range f.delivered() {
		if at.After(lastAt) {
			lastAt = at
		}
	}
	last = int(lastAt.Sub(up).Milliseconds())
	t.Logf("outage %s: %d requests during it (%.2f/s), all %d delivered %.1fs after it ended; %d deferrals",
		outage, during, float64(during)/up.Sub(start).Seconds(), n, float64(last)/1000, b.counter(t, "s", "deferred:breaker"))
	// Before it opens, the requests in flight fail together (up to
	// inFlight); then about one probe a second at most.
	if limit := inFlight + int(outage.Seconds()); during > limit {
		t.Errorf("%d requests during a %s outage; want at most %d (in flight when it began, then ~1/s)", during, outage, limit)
	}
	if lastAt.Sub(up) > 30*time.Second {
		t.Errorf("the last event arrived %s after the outage ended; want within 30s", lastAt.Sub(up))
	}
	if d := b.dead(t, producer.DeadLetterQuery{}); len(d) != 0 || b.deadCount(t, "s") != 0 {
		t.Errorf("%d dead letters (first: %+v); want none", len(d), d)
	}
}

// TestFlappingEndpointNeitherDeadLettersNorGetsMoreThanItsLimit: up 2s,
// down 5s, three times over, then up for good.
func TestFlappingEndpointNeitherDeadLettersNorGetsMoreThanItsLimit(t *testing.T) {
	const n, rate, burst = 150, 20, 5
	b := procBundle(t)
	f := newFlaky(t)
	b.put(t, tasks.Subscriber{ID: "s", URL: f.URL, MaxAttempts: 5, MaxInFlight: 5,
		Limit: limits.Limit{Rate: rate, Burst: burst, Period: time.Second}})
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	for range 3 {
		time.Sleep(2 * time.Second)
		f.down.Store(true)
		time.Sleep(5 * time.Second)
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
