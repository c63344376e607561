package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
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
	// (each event a task of its own, however many wait in asynq, so that
	// every US one is a task to look at: BatchAfter off)
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns, BatchAfter: -1})
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

// Regions are bounded and let go (deploy/CONFIGURATION.md): a namespace's
// subscribers name at most producer.Config.MaxRegions regions, the
// default one included; one more is refused and writes nothing. A region
// no subscriber names any more is served while its queues hold tasks — a
// deleted subscriber's are dropped and counted, never stranded — then let
// go; a moved subscriber's parked events are delivered from its new
// region; the room a region leaves goes to a new one. Its own Redis, so
// that the idle cost of a region, read from Redis' command count, is this
// worker's alone.
func TestRegionsAreBoundedAndLetGo(t *testing.T) {
	t.Parallel() // its own Redis: the commands it counts are its worker's
	ctx := context.Background()
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { rdb.Close() })
	ns := testkit.Namespace("regions")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns, MaxRegions: 3})
	if err != nil {
		t.Fatal(err)
	}
	sink := testkit.NewSink(t, nil)
	put := func(id, region string) error {
		_, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: id, URL: sink.URL, Region: region})
		return err
	}
	send := func(sub, id string) {
		t.Helper()
		if _, err := p.SendTo(ctx, sub, tasks.Event{ID: id, Type: "t", Data: json.RawMessage(`{}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct{ id, region string }{{"eu-crm", "eu"}, {"eu-2", "eu"}, {"us-gone", "us"}} {
		if err := put(s.id, s.region); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("ap-crm", "ap"); !errors.Is(err, producer.ErrInvalid) || !strings.Contains(err.Error(), "region") || !strings.Contains(err.Error(), "HOOKLANE_MAX_REGIONS") {
		t.Fatalf("a fourth region with MaxRegions 3: %v; want ErrInvalid naming region and HOOKLANE_MAX_REGIONS", err)
	}
	if _, err := p.GetSubscriber(ctx, "ap-crm"); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Fatalf("the refused subscriber was stored: %v", err)
	}
	// us-gone is deleted with two events in us' queue, before any worker
	// runs: no subscriber names us any more. (us marked served, as by a
	// worker that just stopped: both go to asynq, not the second to its
	// lot; producer/serving.go.)
	if err := rdb.Set(ctx, tasks.Keys(ns).Serving("us"), "gone", 0).Err(); err != nil {
		t.Fatal(err)
	}
	send("us-gone", "g0")
	send("us-gone", "g1")
	if err := p.DeleteSubscriber(ctx, "us-gone"); err != nil {
		t.Fatal(err)
	}
	pending, _, _, _ := tasks.AsynqQueueKeys(tasks.Keys(ns).ShardQueue("us", tasks.LaneFresh, 0))
	if n, err := rdb.LLen(ctx, pending).Result(); err != nil || n != 2 {
		t.Fatalf("us' fresh queue holds %d tasks, %v; want the deleted subscriber's 2", n, err)
	}

	w, stop := startWorker(t, rdb, ns, worker.Config{RegionCheck: 100 * time.Millisecond})
	defer stop()
	served := func(want ...string) func() bool {
		return func() bool { return slices.Equal(w.ServedRegions(), want) }
	}
	testkit.Eventually(t, 10*time.Second, "the deleted subscriber's queued events dropped", func() bool {
		c, err := worker.ReadCounters(ctx, rdb, ns)
		return err == nil && c[worker.DroppedDeleted] == 2
	})
	testkit.Eventually(t, 10*time.Second, "us let go once its queue is empty", served("default", "eu"))
	if n := sink.Count(); n != 0 {
		t.Fatalf("%d requests; a deleted subscriber's events are dropped, not sent", n)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	euServers := func() int { // asynq Servers that say they serve a queue of eu
		srvs, err := insp.Servers()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range srvs {
			for q := range s.Queues {
				if tasks.Keys(ns).QueueRegion(q) == "eu" {
					n++
					break
				}
			}
		}
		return n
	}
	if n := euServers(); n != 2 {
		t.Fatalf("%d asynq Servers serve idle eu; want its 2 lanes' first dequeue loops (the others start when a lane is busy)", n)
	}
	idle, conns := commandsPerSecond(t, rdb), testkit.InfoInt(t, rdb, "clients", "connected_clients")

	// eu-crm, paused with events parked, moves to the default region; its
	// events go from there once resumed.
	if err := p.SetPaused(ctx, "eu-crm", true); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		send("eu-crm", fmt.Sprintf("m%d", i))
	}
	// Its turn in eu has run and found it paused: its entry in eu's ready
	// index is due far ahead (the move must not leave it there).
	testkit.Eventually(t, 10*time.Second, "the paused subscriber's turn in eu", func() bool {
		at, err := rdb.ZScore(ctx, tasks.Keys(ns).Ready("eu"), "eu-crm").Result()
		return err == nil && time.UnixMilli(int64(at)).After(time.Now().Add(time.Minute))
	})
	if err := put("eu-crm", ""); err != nil {
		t.Fatal(err)
	}
	if err := p.SetPaused(ctx, "eu-crm", false); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the moved subscriber's events delivered", func() bool { return sink.Count() == 3 })
	if err := p.DeleteSubscriber(ctx, "eu-2"); err != nil {
		t.Fatal(err)
	}
	if !testkit.Poll(10*time.Second, served("default")) {
		regions, _ := p.Regions(ctx)
		t.Fatalf("serving %v with regions %v; want eu let go", w.ServedRegions(), regions)
	}
	if regions, err := p.Regions(ctx); err != nil || len(regions) != 1 || regions[tasks.DefaultRegion] != 1 {
		t.Fatalf("the namespace's regions: %v, %v; want only default, named by 1", regions, err)
	}
	testkit.Eventually(t, 10*time.Second, "eu's Servers stopped", func() bool { return euServers() == 0 })
	after, connsAfter := commandsPerSecond(t, rdb), testkit.InfoInt(t, rdb, "clients", "connected_clients")
	// The figure for deploy/CONFIGURATION.md, not a bound: the Servers above are.
	t.Logf("an idle worker costs Redis %.0f commands/s and %d connections serving default and eu, %.0f and %d serving default alone",
		idle, conns, after, connsAfter)
	// The room is free: a new region is served.
	if err := put("ap-crm", "ap"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "ap served", served("ap", "default"))
}

// commandsPerSecond is Redis' rate of commands over two seconds.
func commandsPerSecond(t *testing.T, rdb redis.UniversalClient) float64 {
	t.Helper()
	n0, t0 := testkit.InfoInt(t, rdb, "stats", "total_commands_processed"), time.Now()
	time.Sleep(2 * time.Second)
	n1 := testkit.InfoInt(t, rdb, "stats", "total_commands_processed")
	return float64(n1-n0-2) / time.Since(t0).Seconds()
}
