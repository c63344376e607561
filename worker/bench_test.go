package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// BenchmarkThrottledBacklog publishes 5,000 events at once to one
// subscriber limited to 100/s (burst 20) and reports the rate achieved in
// the steady part, as a share of the limit, and handler runs per delivery.
// Deferring each task by the limiter's own RetryAfter got 33/s and 46 runs
// per delivery here; the target is within a few percent of 100/s and ~1 run.
//
//	go test -run '^$' -bench ThrottledBacklog -benchtime 1x ./worker/
func BenchmarkThrottledBacklog(b *testing.B) {
	const n, rate, burst = 5000, 100, 20
	for range b.N {
		bd := setup(b, worker.Config{})
		s := testkit.NewSink(b, nil)
		bd.put(b, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.Limit{Rate: rate, Burst: burst, Period: time.Second}})
		for i := range n {
			bd.publish(b, fmt.Sprintf("e%05d", i), "t")
		}
		testkit.Eventually(b, 3*n/rate*time.Second, "all deliveries", func() bool { return s.Count() >= n })
		a := s.Got()
		steady := float64(n-burst-1) / a[n-1].At.Sub(a[burst].At).Seconds()
		runs := float64(bd.w.Stats().Runs.Load()) / float64(n)
		b.ReportMetric(steady, "deliveries/s")
		b.ReportMetric(steady/rate, "share-of-limit")
		b.ReportMetric(runs, "runs/delivery")
	}
}
