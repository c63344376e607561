package worker_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A request whose rate-limit slot was booked ahead, and that then found
// every in-flight slot taken, must not go on that old slot once one frees:
// it would leave together with the requests booked after it. At 10/s
// burst 1 and one request in flight, one answer that takes 450ms held the
// next four, which then arrived within 4ms (found by the load harness).
func TestBookedSlotIsNotSentLate(t *testing.T) {
	t.Parallel()
	const events, slowAt = 15, 3
	lim := limits.Limit{Rate: 10, Burst: 1, Period: time.Second}
	var n, inFlight, most atomic.Int64
	rc := testkit.NewReceiver(t, func(http.ResponseWriter, *http.Request, string) bool {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		if n.Add(1) == slowAt {
			time.Sleep(450 * time.Millisecond)
		}
		return true
	})
	b := setup(t, worker.Config{})
	b.put(t, tasks.Subscriber{ID: "s", URL: rc.URL, Limit: lim, MaxInFlight: 1})
	for i := range events {
		b.publish(t, fmt.Sprintf("e%02d", i), "t")
	}
	testkit.Eventually(t, 30*time.Second, "every event delivered", func() bool { return rc.Count() >= events })
	a := rc.Got()
	if m := most.Load(); m > 1 {
		t.Errorf("%d requests in flight at once, the cap is 1", m)
	}
	// 150ms of slack: the gap between the limiter's decision and the
	// arrival, under -race on two cores beside the other parallel tests
	// (20ms failed a clean-clone run with two requests 72ms apart; 50ms,
	// the load harness's, failed one with four within 240ms, where 3.90
	// were allowed; 100ms one with five within 299ms, where 4.99 were,
	// 2026-12-07: a request's timer woken late beside its followers on
	// time). The bug this catches sent four within 4ms: 150ms of slack
	// allows 2.54 there.
	const slack = 150 * time.Millisecond
	for i := range a {
		for j := i; j < len(a); j++ {
			window := a[j].At.Sub(a[i].At) + slack
			if allowed := float64(lim.Burst) + float64(lim.Rate)*window.Seconds(); float64(j-i+1) > allowed {
				at := make([]time.Duration, len(a))
				for k := range a {
					at[k] = a[k].At.Sub(a[0].At).Round(time.Millisecond)
				}
				t.Fatalf("%d requests within %v (from #%d), %s allows %.2f: requests that waited for the in-flight slot went on slots booked before it; arrivals %v",
					j-i+1, a[j].At.Sub(a[i].At), i, lim, allowed, at)
			}
		}
	}
}
