package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A fresh delivery's round trips (its dequeue, Admit, commit and asynq's
// completion) never wait behind the backlog lane's in the worker's
// pipelined client: with that client's two batches on their way and
// stuck (two BLPOPs that nothing answers), a lone event to an idle
// subscriber is still delivered and committed, before either returns.
// With one client for both lanes it waited for them.
func TestFreshDeliveryDoesNotWaitBehindTheBacklogsRoundTrips(t *testing.T) {
	t.Parallel()
	// a read timeout longer than the BLPOPs', which hold their batches
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 64, ReadTimeout: time.Minute})
	t.Cleanup(func() { rdb.Close() })
	b := setupOn(t, rdb, testkit.Namespace("w"), worker.Config{})
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})

	ctx := context.Background()
	// the worker started (its regions read, its Servers running)
	b.publish(t, "evt_0", "video.trending")
	testkit.Eventually(t, 10*time.Second, "the first delivery", func() bool { return s.Count() == 1 })
	stuck := b.ns + ":stuck"
	var returned atomic.Int32
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			b.w.BacklogClient().BLPop(ctx, 30*time.Second, stuck)
			returned.Add(1)
			done <- struct{}{}
		}()
	}
	testkit.Eventually(t, 5*time.Second, "both BLPOPs blocked in Redis", func() bool {
		return testkit.InfoInt(t, rdb, "clients", "blocked_clients") >= 2
	})
	// (enqueued in the fresh lane: the backlog's Servers dequeue with
	// the stuck client)
	if r := b.publish(t, "evt_1", "video.trending"); r.Targets[0].Outcome != producer.Enqueued {
		t.Fatalf("publish: %+v, want enqueued", r.Targets[0])
	}
	testkit.Eventually(t, 10*time.Second, "the delivery sent and committed", func() bool {
		d, err := b.p.GetDelivery(ctx, "s", "evt_1")
		return err == nil && d.State == tasks.StateDelivered
	})
	if n := returned.Load(); n != 0 {
		t.Fatalf("%d of the backlog client's BLPOPs returned before the fresh delivery was committed; want none", n)
	}
	if s.Count() != 2 {
		t.Fatalf("the endpoint got %d requests, want 2", s.Count())
	}
	rdb.LPush(ctx, stuck, 1, 2)
	<-done
	<-done
}
