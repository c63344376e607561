package worker_test

import (
	"context"
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
	// The cooldown is in Redis while the body is still being read (1.5s of
	// it): that is the point. Waiting for it (up to 1s), not for a fixed
	// time, so that a slow machine cannot let the events below go out
	// before it was written.
	if !testkit.Poll(time.Second, func() bool {
		n, _ := b.rdb.Exists(t.Context(), tasks.Keys(b.ns).Gates("s").Cooldown).Result()
		return n == 1
	}) {
		t.Fatalf("no cooldown in Redis 1s after the 429's headers, while its body was still being read")
	}
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

// obeysRetryAfterInFlight has subscriber id of b (at most 4 in flight)
// answer its first request 429 with Retry-After: 2 and publishes 12
// events. Every other request is held at the receiver until the cooldown
// is in Redis, so the slots taken before it was written stay taken until
// then: at most 3 requests can have passed their last look before the
// cooldown existed, and only those may arrive before the deadline. It
// fails if more do, or if the cooldown is not in Redis within 5s of the
// answer, and returns how many arrived before the deadline besides the
// 429 (overlap) and after it. No grace in time: a worker slowed by a
// loaded machine cannot make it fail, one that ignores the cooldown does.
func obeysRetryAfterInFlight(t *testing.T, b *bundle, id string, lim limits.Limit) (overlap, after int) {
	t.Helper()
	const maxInFlight = 4
	var deadline, answered atomic.Pointer[time.Time]
	var cooldownLate atomic.Bool
	cooldown := tasks.Keys(b.ns).Gates(id).Cooldown
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "2")
			now := time.Now()
			d := now.Add(2 * time.Second)
			deadline.Store(&d)
			answered.Store(&now)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		for give := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			if n, _ := b.rdb.Exists(context.Background(), cooldown).Result(); n == 1 {
				return
			}
			if time.Now().After(give) {
				cooldownLate.Store(true)
				return
			}
		}
	})
	b.put(t, tasks.Subscriber{ID: id, URL: s.URL, MaxInFlight: maxInFlight, Limit: lim})
	const n = 12
	for i := range n {
		b.publish(t, fmt.Sprintf("e%02d", i), "t")
	}
	testkit.Eventually(t, 20*time.Second, "every event delivered", func() bool { return s.Count() == n+1 })
	if cooldownLate.Load() {
		t.Fatalf("the cooldown was not in Redis 5s after the 429")
	}
	var early []string
	for _, a := range s.Got()[1:] {
		if a.At.Before(*deadline.Load()) {
			early = append(early, fmt.Sprintf("%s %v after the 429", a.ID, a.At.Sub(*answered.Load()).Round(time.Millisecond)))
			continue
		}
		after++
	}
	if len(early) > maxInFlight-1 {
		t.Fatalf("%d requests arrived before the Retry-After deadline, at most %d were on their way: %v", len(early), maxInFlight-1, early)
	}
	return len(early), after
}
