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

// A 429 whose body takes its time: its cooldown is recorded as soon as the
// status line and headers arrive, so events published meanwhile, with
// in-flight slots free, wait for the deadline too instead of going out
// while the body is still being read.
func TestCooldownRecordedBeforeTheBodyIsRead(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	var deadline atomic.Pointer[time.Time]
	headersSent := make(chan struct{})
	var throttled atomic.Bool
	s := testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, id string) bool {
		if id != "slow-429" || throttled.Swap(true) {
			return true // the throttled event's own retry, after the deadline, is taken too
		}
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		w.(http.Flusher).Flush()
		d := time.Now().Add(3 * time.Second)
		deadline.Store(&d)
		close(headersSent)
		for range 15 { // 1.5s of body, a byte at a time
			fmt.Fprint(w, "x")
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
		return false
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.PerSecond(1000), MaxInFlight: 4})
	b.publish(t, "slow-429", "t")
	<-headersSent
	// Give the worker the round trip it takes to record the cooldown, but
	// not the 1.5s the body takes: that is the point.
	testkit.Poll(200*time.Millisecond, func() bool {
		n, _ := b.rdb.Exists(t.Context(), tasks.Keys(b.ns).Gates("s").Cooldown).Result()
		return n == 1
	})
	for i := range 10 {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 20*time.Second, "the ten events and the throttled one delivered", func() bool { return s.Count() == 12 })
	for _, a := range s.Got()[1:] {
		if a.At.Before(*deadline.Load()) {
			t.Fatalf("%s arrived %v before the Retry-After deadline, while the 429's body was read", a.ID, deadline.Load().Sub(a.At))
		}
	}
}

// With several requests in flight when one is answered 429, those already
// on their way arrive as they may; nothing that leaves after the answer
// arrives before its deadline.
func TestRetryAfterWithManyInFlight(t *testing.T) {
	t.Parallel()
	// Far from the limit, every request is admitted at once; at 10/s
	// burst 1, requests wait on rate-limit slots booked ahead when the 429
	// comes, and must look at the cooldown again before they go.
	for name, lim := range map[string]limits.Limit{"admitted": limits.PerSecond(1000), "reserved": {Rate: 10, Burst: 1, Period: time.Second}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			retryAfterInFlight(t, lim)
		})
	}
}

func retryAfterInFlight(t *testing.T, lim limits.Limit) {
	overlap, after := obeysRetryAfterInFlight(t, setup(t, worker.Config{}), "s", lim)
	if after == 0 {
		t.Fatalf("every request overlapped the 429 (%d): the test proves nothing", overlap)
	}
	t.Logf("%d requests were in flight with the 429, %d waited for its deadline", overlap, after)
}

// obeysRetryAfterInFlight has subscriber id of b answer its first request
// 429 with Retry-After: 2 while up to 3 others are in flight (each answer
// takes 50ms), publishes 12 events, and fails if any request that left
// after the 429 (50ms of grace) arrived before the deadline. It returns how
// many arrived within the grace (overlap) and after the deadline.
func obeysRetryAfterInFlight(t *testing.T, b *bundle, id string, lim limits.Limit) (overlap, after int) {
	t.Helper()
	var deadline, answered atomic.Pointer[time.Time]
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "2")
			now := time.Now()
			d := now.Add(2 * time.Second)
			deadline.Store(&d)
			w.WriteHeader(http.StatusTooManyRequests)
			answered.Store(&now)
			return
		}
		time.Sleep(50 * time.Millisecond) // keep the others in flight
	})
	b.put(t, tasks.Subscriber{ID: id, URL: s.URL, MaxInFlight: 4, Limit: lim})
	const n = 12
	for i := range n {
		b.publish(t, fmt.Sprintf("e%02d", i), "t")
	}
	testkit.Eventually(t, 20*time.Second, "every event delivered", func() bool { return s.Count() == n+1 })
	// 50ms of grace: a request the worker sent just before the 429 reached
	// it can arrive just after the receiver answered.
	cutoff := answered.Load().Add(50 * time.Millisecond)
	for _, a := range s.Got()[1:] {
		switch {
		case a.At.Before(cutoff):
			overlap++
		case a.At.Before(*deadline.Load()):
			t.Fatalf("%s arrived %v before the Retry-After deadline, %v after the 429", a.ID,
				deadline.Load().Sub(a.At), a.At.Sub(*answered.Load()))
		default:
			after++
		}
	}
	return overlap, after
}
