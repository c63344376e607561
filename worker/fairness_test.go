package worker_test

import (
	"context"
	"fmt"
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
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns})
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
