package loadtest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// The harness waits for, samples and lists dead letters in the queues it
// derives from a namespace's layout: with several shards and a region it
// must find the queue of every task the producer writes, and the lot of
// every subscriber, or a scenario would stop waiting while tasks are
// still queued or parked.
func TestQueuesOfFindsEveryShardAndRegion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	rdb, err := deploy.RedisConfig{URL: r.URL}.NewClient(deploy.ClientTuning{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	const ns, shards = "q", 3
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns, Shards: shards, AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	// Ids chosen so that every shard of both regions gets a subscriber.
	var subs []tasks.Subscriber
	for _, region := range []string{"", "eu"} {
		seen := map[int]bool{}
		for i := 0; len(seen) < shards; i++ {
			id := fmt.Sprintf("%s-%d", region, i)
			if sh := tasks.Shard(id, shards); !seen[sh] {
				seen[sh] = true
				subs = append(subs, tasks.Subscriber{ID: id, URL: "http://127.0.0.1:1/", EventTypes: []string{"t"}, Region: region})
			}
		}
	}
	for _, s := range subs {
		if _, err := p.PutSubscriber(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// Both regions served, as by a running worker (worker/serving.go): a
	// subscriber's second event goes to asynq, not to its lot.
	for _, region := range []string{"", "eu"} {
		if err := rdb.Set(ctx, tasks.Keys(ns).Serving(region), "test", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Publish(ctx, tasks.Event{ID: "e1", Type: "t", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	// A paused subscriber's delivery is parked in its lot, not queued.
	if err := p.SetPaused(ctx, subs[0].ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, tasks.Event{ID: "e2", Type: "t", Data: []byte(`2`)}, nil); err != nil {
		t.Fatal(err)
	}
	e := &env{rdb: rdb}
	qs := e.queuesOf(ctx, ns)
	keys := tasks.Keys(ns)
	for _, s := range subs {
		for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
			if q := keys.DeliveryQueue(s.Region, s.ID, lane, shards); !slices.Contains(qs, q) {
				t.Errorf("queue %s of subscriber %s missing from %v", q, s.ID, qs)
			}
		}
	}
	if want := 2 * 2 * shards; len(qs) != want {
		t.Errorf("%d queues %v, want %d (2 regions × 2 lanes × %d shards)", len(qs), qs, want, shards)
	}
	q, err := backlog(ctx, rdb, e.stockOf(ctx, ns))
	if err != nil {
		t.Fatal(err)
	}
	if q.Backlog() != 2*int64(len(subs)) || q.Later != 1 {
		t.Errorf("backlog %+v, want the %d tasks published, the one parked later", q, 2*len(subs))
	}
	if e.settled(ctx, e.stockOf(ctx, ns)) {
		t.Error("settled with work queued and parked")
	}
}
