package worker_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// The namespace's totals are every subscriber's counters summed, field by
// field: deliveries, failures, dead letters, HTTP statuses and the latency
// histograms' buckets and sums, and a 429 with Retry-After lists its
// destination in the cooling set.
func TestTotalsSumEverySubscriber(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	ok := testkit.NewSink(t, nil)
	down := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusBadGateway) })
	angry := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	b.put(t, tasks.Subscriber{ID: "a", URL: ok.URL, EventTypes: []string{"x"}})
	b.put(t, tasks.Subscriber{ID: "b", URL: ok.URL, EventTypes: []string{"x", "y"}})
	b.put(t, tasks.Subscriber{ID: "down", URL: down.URL, EventTypes: []string{"y"}, MaxAttempts: 2})
	b.put(t, tasks.Subscriber{ID: "angry", URL: angry.URL, EventTypes: []string{"z"}})
	for i := range 5 {
		b.publish(t, fmt.Sprintf("x%d", i), "x")
	}
	b.publish(t, "y0", "y")
	b.publish(t, "z0", "z")
	ctx := context.Background()
	subs := []string{"a", "b", "down", "angry"}
	sum := func() map[string]int64 {
		out := map[string]int64{}
		for _, s := range subs {
			st, err := worker.ReadStats(ctx, b.rdb, b.ns, s)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range st {
				out[k] += v
			}
		}
		return out
	}
	var want, got map[string]int64
	testkit.Eventually(t, 20*time.Second, "totals equal to the sum of every subscriber's counters", func() bool {
		want = sum()
		if want["delivered"] != 12 || want["dead:attempts"] != 1 {
			return false // 5 to a, 6 to b, 1 to angry after its 429; y0 dead at down
		}
		var err error
		if got, err = worker.ReadTotals(ctx, b.rdb, b.ns); err != nil {
			t.Fatal(err)
		}
		return maps.Equal(got, want)
	})
	// Every kind of field is there, not only the ones polled for.
	for f, n := range map[string]int64{"http:200": 12, "http:502": 2, "http:429": 1, "failed": 1, "deferred:retry_after": 1} {
		if got[f] != n {
			t.Errorf("totals[%s] = %d, want %d (totals %v)", f, got[f], n, got)
		}
	}
	for _, f := range []string{"e2e_sum_ms", "late_sum_ms"} {
		if _, ok := got[f]; !ok {
			t.Errorf("totals lack %s: %v", f, got)
		}
	}
	n, err := b.rdb.ZCard(ctx, tasks.Keys(b.ns).Cooling()).Result()
	if err != nil || n != 1 {
		t.Fatalf("cooling set holds %d (%v), want angry", n, err)
	}
}
