package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Issue 34, requirement 4: a dispatcher's turn of a registered tenant past
// its fresh rate this second hands out to the backlog lane; another
// tenant's turn, under its rate, to the fresh lane. Each tenant's
// subscriber has 4 events parked (published while paused); its receiver
// holds the requests, so that the tasks stay in asynq, in their lane.
func TestTurnsOfATenantPastItsFreshRateTakeTheBacklogLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("tflow")
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	hold := testkit.NewSink(t, func(http.ResponseWriter, int) { <-release })
	keys := tasks.Keys(ns)
	for _, tenant := range []string{"big", "small"} {
		if _, _, err := p.PutTenant(ctx, tenant, producer.TenantSettings{}); err != nil {
			t.Fatal(err)
		}
		tp, _ := p.Tenant(tenant)
		if _, err := tp.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: hold.URL, Limit: limits.PerSecond(1000), MaxInFlight: 100}); err != nil {
			t.Fatal(err)
		}
		publishHeld(t, tp, "s", []string{"e1", "e2", "e3", "e4"})
	}
	// big is past its rate for the whole test; small under it
	rdb.Set(ctx, keys.TenantFlow("big"), 1_000_000, time.Minute)
	rdb.Del(ctx, keys.TenantFlow("small"))
	_, stop := startWorker(t, rdb, ns, worker.Config{})
	defer stop()
	defer once.Do(func() { close(release) }) // before the worker stops: it waits for its requests
	insp := asynq.NewInspectorFromRedisClient(rdb)
	lanes := func(tenant string) map[string]int {
		out := map[string]int{}
		for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
			q := keys.DeliveryQueue("", tasks.ScopedID(tenant, "s"), lane, 1)
			for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){insp.ListPendingTasks, insp.ListActiveTasks} {
				tis, err := list(q, asynq.PageSize(100))
				if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
					t.Fatal(err)
				}
				for _, ti := range tis {
					if tasks.TenantOf(ti.ID) == tenant {
						out[lane]++
					}
				}
			}
		}
		return out
	}
	testkit.Eventually(t, 20*time.Second, "both tenants' events handed out", func() bool {
		return len(lanes("big")) > 0 && len(lanes("small")) > 0 && hold.Count() >= 8
	})
	if big, small := lanes("big"), lanes("small"); big[tasks.LaneFresh] != 0 || big[tasks.LaneBacklog] == 0 ||
		small[tasks.LaneBacklog] != 0 || small[tasks.LaneFresh] == 0 {
		t.Fatalf("tasks by lane: big %v, small %v; want big's in the backlog lane alone, small's in the fresh lane alone",
			fmt.Sprint(big), fmt.Sprint(small))
	}
}
