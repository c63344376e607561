package producer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// On a Redis Cluster a batch books in one round trip per master for each
// of its steps (the types' lookup, the events' store, the bookings), its
// subscribers' slots spread over all three masters, and is answered as on
// one server: each event enqueued for each subscriber, then each a
// duplicate when the batch is sent again.
func TestPublishBatchOnACluster(t *testing.T) {
	testkit.Heavy(t, "a Redis Cluster")
	t.Parallel()
	ctx := context.Background()
	c, err := deploy.StartCluster(ctx, deploy.ClusterOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	var mu sync.Mutex
	perNode := map[string]int{} // the pipelines each master was sent
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer rdb.Close()
	rdb.OnNewNode(func(n *redis.Client) {
		addr := n.Options().Addr
		n.AddHook(pipelineHook(func(cmds []redis.Cmder) {
			mu.Lock()
			perNode[addr]++
			mu.Unlock()
		}))
	})
	ns := testkit.Namespace("pcl")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Ids whose slots ({<id>}) fall on all three masters (worker/cluster_test.go's).
	ids := []string{"crm", "delta", "acme", "fox", "echo", "hotel"}
	masters := map[string]bool{}
	for _, id := range ids {
		if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: id, URL: "https://a.test/h", EventTypes: []string{"video.*"}}); err != nil {
			t.Fatal(err)
		}
		m, err := testkit.MasterForKey(ctx, c, "{"+id+"}")
		if err != nil {
			t.Fatal(err)
		}
		masters[m] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the subscribers' slots are on %d masters; want 3 (the test's premise)", len(masters))
	}
	evs := func(prefix string) []tasks.Event {
		out := make([]tasks.Event, 20)
		for i := range out {
			out[i] = event(fmt.Sprintf("%s-%02d", prefix, i), "video.trending")
		}
		return out
	}
	if _, err := p.PublishBatch(ctx, evs("warm"), nil); err != nil { // the slots' map, the scripts, asynq's queues
		t.Fatal(err)
	}
	for round, want := range []producer.Outcome{producer.Enqueued, producer.Duplicate} {
		mu.Lock()
		clear(perNode)
		mu.Unlock()
		got, err := p.PublishBatch(ctx, evs("e"), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			if r.Err != nil || len(r.Result.Targets) != len(ids) {
				t.Fatalf("round %d, event %d: %+v, %v; want %d targets", round, i, r.Result, r.Err, len(ids))
			}
			for _, tg := range r.Result.Targets {
				if tg.Outcome != want && (want != producer.Enqueued || !tg.Outcome.Booked()) {
					t.Fatalf("round %d, event %d: %s %s; want %s", round, i, tg.SubscriberID, tg.Outcome, want)
				}
			}
		}
		mu.Lock()
		// Each master gets the stores and bookings of its subscribers' slots,
		// one pipeline each; one master the type lookup, one the ready
		// index's wake-ups of the deliveries parked in a lot (all of them
		// here once the warm-up took the rate's burst): on the same master
		// when the two slots fall together.
		for addr, n := range perNode {
			if n > 4 {
				t.Errorf("round %d: %d pipelines to %s; want at most 4 (lookup, store, bookings, wake-ups)", round, n, addr)
			}
		}
		t.Logf("round %d: pipelines per master %v", round, perNode)
		mu.Unlock()
	}
}

// pipelineHook calls f with each pipeline a client sends.
type pipelineHook func(cmds []redis.Cmder)

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h(cmds)
		return next(ctx, cmds)
	}
}
