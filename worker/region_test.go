package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Seed 001's residency rule: a worker started for the EU claims only EU
// deliveries. A US subscriber's events wait, untouched, until a US worker
// runs, which delivers them.
func TestRegionWorkersClaimOnlyTheirRegion(t *testing.T) {
	t.Parallel()
	// Both subscribers exist before the worker starts: a worker serving
	// every region would find the US one at start, not 10 s later.
	ns := testkit.Namespace("region")
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{ns: ns, rdb: rdb, p: p, insp: asynq.NewInspectorFromRedisClient(rdb)}
	eu, us := testkit.NewSink(t, nil), testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "eu-crm", URL: eu.URL, Region: "eu"})
	b.put(t, tasks.Subscriber{ID: "us-crm", URL: us.URL, Region: "us"})
	var stopEU func()
	b.w, stopEU = startWorker(t, rdb, ns, worker.Config{Regions: []string{"eu"}})
	defer stopEU()
	const n = 10
	for i := range n {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 10*time.Second, "the EU deliveries", func() bool { return eu.Count() == n })
	// Every US task is in a US queue, due and untouched.
	for i := range n {
		info, err := testkit.Task(b.insp, b.ns, tasks.TaskID("us-crm", fmt.Sprintf("e%d", i)))
		if err != nil || info.Queue != tasks.Keys(b.ns).DeliveryQueue("us", "us-crm", tasks.LaneFresh, 1) || info.Retried != 0 {
			t.Fatalf("US task e%d: %s in queue %v; want it waiting in the US fresh queue", i, testkit.State(info, err), info)
		}
	}
	if us.Count() != 0 || b.w.Stats().Runs.Load() != n {
		t.Fatalf("the EU worker made %d runs and the US endpoint got %d requests; want %d runs, all EU, and none", b.w.Stats().Runs.Load(), us.Count(), n)
	}
	// A US worker delivers them.
	_, stop := startWorker(t, b.rdb, b.ns, worker.Config{Regions: []string{"us"}})
	defer stop()
	testkit.Eventually(t, 10*time.Second, "the US deliveries by the US worker", func() bool { return us.Count() == n })
	if got := b.w.Stats().Runs.Load(); got != n {
		t.Fatalf("the EU worker made %d runs, want only its %d", got, n)
	}
}
