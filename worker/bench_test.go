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

// BenchmarkThrottledBacklog publishes a backlog at once to one subscriber
// limited to 100, 300 and 1,000 per second (burst 20, max in-flight 50) and
// reports the rate achieved in the steady part, as a share of the limit,
// handler runs per delivery and rate-limit deferrals per delivery. Deferring
// each task by the limiter's own RetryAfter got 33/s and 46 runs per
// delivery at 100/s; the target is within 3% of the limit and ~1 run.
//
//	go test -run '^$' -bench ThrottledBacklog -benchtime 1x ./worker/
func BenchmarkThrottledBacklog(b *testing.B) {
	for _, rate := range []int{100, 300, 1000} {
		b.Run(fmt.Sprintf("%d/s", rate), func(b *testing.B) {
			n, burst := max(rate*20, 5000), 20
			for range b.N {
				bd := setup(b, worker.Config{})
				s := testkit.NewSink(b, nil)
				bd.put(b, tasks.Subscriber{ID: "s", URL: s.URL, MaxInFlight: 50,
					Limit: limits.Limit{Rate: rate, Burst: burst, Period: time.Second}})
				for i := range n {
					bd.publish(b, fmt.Sprintf("e%05d", i), "t")
				}
				testkit.Eventually(b, time.Duration(3*n/rate+30)*time.Second, "all deliveries", func() bool { return s.Count() >= n })
				a := s.Got()
				steady := float64(n-burst-1) / a[n-1].At.Sub(a[burst].At).Seconds()
				runs := float64(bd.w.Stats().Runs.Load()) / float64(n)
				b.ReportMetric(steady, "deliveries/s")
				b.ReportMetric(steady/float64(rate), "share-of-limit")
				b.ReportMetric(runs, "runs/delivery")
				b.ReportMetric(float64(bd.counter(b, "s", "deferred:"+worker.GateRateLimit))/float64(n), "rate-deferrals/delivery")
			}
		})
	}
}
