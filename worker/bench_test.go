package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
	"github.com/redis/go-redis/v9"
)

// BenchmarkThrottledBacklog publishes a backlog at once to one subscriber
// limited to 100, 300 and 1,000 per second (burst 20, max in-flight 50) and
// reports the rate achieved in the steady part, as a share of the limit,
// handler runs per delivery and deliveries handed out of the schedule per
// delivery (parked by the publish, handed to asynq at their turn).
// Deferring each task by the limiter's own RetryAfter got 33/s and 46 runs
// per delivery at 100/s; the target is within 3% of the limit and ~1 run.
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
				b.ReportMetric(float64(bd.w.Stats().HandedOut.Load())/float64(n), "handed-out/delivery")
			}
		})
	}
}

// BenchmarkFairness queues 20,000 events for one fast subscriber, then 5
// for another, then starts a worker, and reports how long after the start
// the 5 arrived, and how many of the flood went before them. One FIFO queue
// sent them last: 9.2s after the start here.
//
//	go test -run '^$' -bench Fairness -benchtime 1x ./worker/
func BenchmarkFairness(b *testing.B) {
	for range b.N {
		ctx := context.Background()
		ns := testkit.Namespace("fairbench")
		rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 64})
		p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
		if err != nil {
			b.Fatal(err)
		}
		hot, other := testkit.NewSink(b, nil), testkit.NewSink(b, nil)
		for id, url := range map[string]string{"hot": hot.URL, "other": other.URL} {
			if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: id, URL: url, Limit: limits.PerSecond(1_000_000), MaxInFlight: 1000}); err != nil {
				b.Fatal(err)
			}
		}
		const flood = 20_000
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := g; i < flood; i += 8 {
					if _, err := p.SendTo(ctx, "hot", tasks.Event{ID: fmt.Sprintf("h%05d", i), Type: "t", Data: []byte(`1`)}, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		for i := range 5 {
			if _, err := p.SendTo(ctx, "other", tasks.Event{ID: fmt.Sprintf("o%d", i), Type: "t", Data: []byte(`1`)}, nil); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		_, stop := startWorker(b, rdb, ns, worker.Config{})
		testkit.Eventually(b, 2*time.Minute, "the 5", func() bool { return other.Count() == 5 })
		at := other.Got()[4].At
		testkit.Eventually(b, 2*time.Minute, "the flood", func() bool { return hot.Count() == flood })
		before := 0
		for _, a := range hot.Got() {
			if a.At.Before(at) {
				before++
			}
		}
		drained := hot.Got()[flood-1].At.Sub(start)
		stop()
		rdb.Close()
		b.ReportMetric(at.Sub(start).Seconds(), "s-to-the-5")
		b.ReportMetric(float64(before), "flood-before-the-5")
		b.ReportMetric(drained.Seconds(), "s-to-drain-the-flood")
	}
}

// BenchmarkSlotLimited queues 600 events for a subscriber whose in-flight
// slots bound it (a loopback endpoint answering after a delay), paused so
// that its turns hand them out, then resumes it, and reports the pace of
// arrivals 200 to 500, as batches (the default) and as a task each
// (BatchMax 1), and that pace's share of what the slots allow (slots ÷
// delay). A batch's commit that waited for the deliveries waiting for its
// slot sent a one-slot endpoint's batches at 119–123/s against a task
// each's 424–458/s.
//
//	go test -run '^$' -bench SlotLimited -benchtime 1x ./worker/
func BenchmarkSlotLimited(b *testing.B) {
	for _, shape := range []struct {
		slots int
		delay time.Duration
	}{{1, 0}, {4, 20 * time.Millisecond}, {20, 5 * time.Millisecond}} {
		for _, v := range []struct {
			name     string
			batchMax int
		}{{"batches", 0}, {"task-each", 1}} {
			b.Run(fmt.Sprintf("%d-slots-%v/%s", shape.slots, shape.delay, v.name), func(b *testing.B) {
				for range b.N {
					bd := setup(b, worker.Config{BatchMax: v.batchMax})
					s := testkit.NewSink(b, func(w http.ResponseWriter, _ int) {
						time.Sleep(shape.delay)
						w.WriteHeader(http.StatusOK)
					})
					bd.put(b, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.PerSecond(100_000), MaxInFlight: shape.slots})
					ctx := context.Background()
					if err := bd.p.SetPaused(ctx, "s", true); err != nil {
						b.Fatal(err)
					}
					const n = 600
					for i := range n {
						bd.publish(b, fmt.Sprintf("e%03d", i), "t")
					}
					if err := bd.p.SetPaused(ctx, "s", false); err != nil {
						b.Fatal(err)
					}
					testkit.Eventually(b, 2*time.Minute, "all deliveries", func() bool { return s.Count() >= n })
					a := s.Got()
					pace := 300 / a[500].At.Sub(a[200].At).Seconds()
					b.ReportMetric(pace, "deliveries/s")
					if shape.delay > 0 {
						b.ReportMetric(pace*shape.delay.Seconds()/float64(shape.slots), "share-of-slots")
					}
					b.ReportMetric(float64(bd.w.Stats().Batched.Load())/n, "batched-share")
					// above 1: parked again and handed out again
					b.ReportMetric(float64(bd.w.Stats().HandedOut.Load())/n, "handed-out/delivery")
				}
			})
		}
	}
}
