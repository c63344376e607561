package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A subscriber's flood does not hold up the others: 2,000 events queued
// for one fast subscriber, then 5 for another, then a worker starts. The 5
// go out among the flood's first deliveries, not after it (one queue would
// send them last). Asserted on order, not speed.
func TestOneSubscribersFloodDoesNotHoldUpAnother(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("fair")
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	// The default fresh-lane cap: 100 of a subscriber's tasks at once.
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	hot, other := testkit.NewSink(t, nil), testkit.NewSink(t, nil)
	for id, url := range map[string]string{"hot": hot.URL, "other": other.URL} {
		if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: id, URL: url, Limit: limits.PerSecond(1_000_000), MaxInFlight: 100}); err != nil {
			t.Fatal(err)
		}
	}
	const flood = 2000
	send := func(sub string, n int) {
		for i := range n {
			if _, err := p.SendTo(ctx, sub, tasks.Event{ID: fmt.Sprintf("%s-%04d", sub, i), Type: "t", Data: []byte(`1`)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("hot", flood)
	send("other", 5)
	_, stop := startWorker(t, rdb, ns, worker.Config{})
	defer stop()
	testkit.Eventually(t, 30*time.Second, "the other subscriber's 5 events", func() bool { return other.Count() == 5 })
	last := other.Got()[4].At
	before := 0
	for _, a := range hot.Got() {
		if a.At.Before(last) {
			before++
		}
	}
	if before >= flood/5 {
		t.Fatalf("%d of the flood's %d events went out before the other subscriber's 5; want them among the first %d", before, flood, flood/5)
	}
	t.Logf("the other subscriber's 5 events went out after %d of the flood's %d", before, flood)
	testkit.Eventually(t, 60*time.Second, "the flood delivered", func() bool { return hot.Count() == flood })
	// Each delivered task left the fresh-lane count: new events go there again.
	keys := tasks.Keys(ns)
	testkit.Eventually(t, 10*time.Second, "the fresh-lane count back to 0", func() bool {
		return rdb.ZCard(ctx, keys.Gates("hot").Fresh).Val() == 0
	})
}

// The fresh-lane cap holds for an endpoint that keeps failing: at most
// FreshMax of a subscriber's tasks wait in its fresh lane (pending, or
// scheduled or retrying there) at any moment, however long it fails.
// Failed deliveries wait for their backoff in the subscriber's schedule,
// not in the fresh queue; with the fresh-lane entries' lifetime shortened
// to 300ms (limits.FreshTTL, 10 min), a task left in the fresh queue past
// it would let more in. (A run commits its outcome, which takes its task
// off the count, a moment before asynq removes the task: the active ones
// are counted apart.)
func TestFreshLaneCapHoldsForAFailingEndpoint(t *testing.T) {
	// Not parallel: it shortens limits.FreshTTL for the package. Restored
	// by a cleanup registered before the worker's, so it runs after the
	// worker (whose dispatchers read it) has stopped.
	ttl := limits.FreshTTL
	t.Cleanup(func() { limits.FreshTTL = ttl })
	limits.FreshTTL = 300 * time.Millisecond
	ctx := context.Background()
	// Ten handler slots for a destination that takes 300 at once: its
	// tasks wait in the queues, and only the cap keeps them from all
	// waiting in the fresh lane.
	b := setup(t, worker.Config{Concurrency: 10, BackoffBase: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Breaker: limits.BreakerPolicy{Failures: limits.BreakerOff}}) // every task keeps being tried
	down := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b.put(t, tasks.Subscriber{ID: "s", URL: down.URL, MaxAttempts: 100, MaxInFlight: 300, Limit: limits.PerSecond(1000)})
	const freshMax = 100 // producer.Config.FreshMax's default, the worker's too
	queue := tasks.Keys(b.ns).DeliveryQueue("", "s", tasks.LaneFresh, 1)
	inFresh := func() (waiting, active int64) {
		p, a, sc, r := tasks.AsynqQueueKeys(queue)
		cmds, _ := b.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			pl.LLen(ctx, p)
			pl.ZCard(ctx, sc)
			pl.ZCard(ctx, r)
			pl.LLen(ctx, a)
			return nil
		})
		for _, c := range cmds[:3] {
			waiting += c.(*redis.IntCmd).Val()
		}
		return waiting, cmds[3].(*redis.IntCmd).Val()
	}
	for i := range 300 {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	var most, mostActive int64
	deadline := time.Now().Add(3 * time.Second) // ten entry lifetimes of failing
	for time.Now().Before(deadline) {
		w, a := inFresh()
		most, mostActive = max(most, w), max(mostActive, a)
		time.Sleep(10 * time.Millisecond) // the sampling interval
	}
	if down.Count() < 600 {
		t.Fatalf("%d requests in 3s; want the endpoint tried over and over (≥ 600)", down.Count())
	}
	if most > freshMax {
		t.Fatalf("%d tasks waiting in the fresh lane at once; want at most %d", most, freshMax)
	}
	if mostBacklog := testkit.QueueSize(t, b.insp, tasks.Keys(b.ns).DeliveryQueue("", "s", tasks.LaneBacklog, 1)); mostBacklog == 0 {
		t.Fatal("nothing went to the backlog lane: the cap was never reached")
	}
	t.Logf("at most %d waiting and %d running in the fresh lane over %d failed requests", most, mostActive, down.Count())
}
