package worker_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// Two hooklane worker processes deliver to one subscriber: its rate limit
// and its in-flight cap hold for both together, because both are kept in
// Redis, and both processes take part.
func TestLimitsHoldAcrossWorkerProcesses(t *testing.T) {
	// Not parallel: a timing check, run alone.
	const n, rate, burst, maxInFlight = 150, 20, 5, 3
	var inFlight, most atomic.Int64
	rc := testkit.NewReceiver(t, func(http.ResponseWriter, *http.Request, string) bool {
		now := inFlight.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(30 * time.Millisecond)
		inFlight.Add(-1)
		return true
	})
	b := newCrashBundle(t, testkit.Namespace("two-procs-"), tasks.Subscriber{ID: "s", URL: rc.URL,
		Limit: limits.Limit{Rate: rate, Burst: burst, Period: time.Second}, MaxInFlight: maxInFlight})
	procs := []*proc{startProc(t, redisURL(), b.ns, "HOOKLANE_LOG_LEVEL=debug"), startProc(t, redisURL(), b.ns, "HOOKLANE_LOG_LEVEL=debug")}
	b.publishN(t, "e", n)
	testkit.Eventually(t, 60*time.Second, "every event delivered", func() bool { return len(rc.Got()) >= n })
	a := rc.Got()
	if len(a) != n {
		t.Fatalf("%d requests for %d events", len(a), n)
	}
	if m := most.Load(); m > maxInFlight {
		t.Errorf("%d requests in flight at once, max %d", m, maxInFlight)
	}
	// No window may hold more than burst + rate·t; 100ms of slack covers
	// the gap between a limiter's decision and the arrival.
	const slack = 100 * time.Millisecond
	for i := range a {
		for j := i; j < len(a); j++ {
			window := a[j].At.Sub(a[i].At) + slack
			if allowed := burst + rate*window.Seconds(); float64(j-i+1) > allowed {
				t.Fatalf("%d arrivals in %v (from #%d), the limit allows %.1f", j-i+1, window, i, allowed)
			}
		}
	}
	steady := float64(n-burst-1) / a[n-1].At.Sub(a[burst].At).Seconds()
	if steady < rate*0.97 || steady > rate*1.03 {
		t.Errorf("steady rate %.2f/s across both processes, want within 3%% of %d/s", steady, rate)
	}
	var shares []int
	count := func() {
		shares = shares[:0]
		for _, p := range procs {
			shares = append(shares, strings.Count(p.log.String(), "msg=delivered"))
		}
	}
	// A process logs a delivery just after the receiver answered it.
	testkit.Poll(5*time.Second, func() bool { count(); return shares[0]+shares[1] == n })
	if shares[0]+shares[1] != n || shares[0] < n/20 || shares[1] < n/20 {
		t.Errorf("deliveries by process %v; want both to take part (%d in all)", shares, n)
	}
	t.Logf("steady %.2f/s, at most %d in flight, deliveries by process %v", steady, most.Load(), shares)
}
