package producer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// Issue 34, requirement 4: a tenant publishing past TenantFreshRate
// deliveries a second puts the rest of that second's in the backlog lane,
// so the fresh lane stays for the others: tenant big's first publish (3
// deliveries, within 5) goes fresh, its next two (past 5) to the backlog
// lane, tenant small's and the default tenant's stay fresh, and big's
// next second is fresh again. A batch publish counts its events.
func TestTenantPastItsFreshRateTakesTheBacklogLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("flow")
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns, TenantFreshRate: 5, BatchAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	keys := tasks.Keys(ns)
	tp := map[string]*producer.Producer{}
	for name, n := range map[string]int{"big": 3, "small": 1, tasks.DefaultTenant: 3} {
		if name != tasks.DefaultTenant {
			if _, _, err := p.PutTenant(ctx, name, producer.TenantSettings{}); err != nil {
				t.Fatal(err)
			}
		}
		tp[name], _ = p.Tenant(name)
		for i := range n {
			if _, err := tp[name].PutSubscriber(ctx, tasks.Subscriber{ID: fmt.Sprintf("s%d", i), URL: "http://127.0.0.1:9/x",
				Limit: limits.PerSecond(1000), MaxInFlight: 1000}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// lanes counts the pending tasks of each tenant's in each lane.
	lanes := func() map[string]int {
		out := map[string]int{}
		for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
			ts, err := insp.ListPendingTasks(keys.ShardQueue("", lane, 0), asynq.PageSize(1000))
			if err != nil && lane == tasks.LaneFresh {
				t.Fatal(err)
			}
			for _, ti := range ts {
				out[tasks.TenantOf(ti.ID)+" "+lane]++
			}
		}
		return out
	}
	publish := func(tenant, id string) {
		t.Helper()
		if _, err := tp[tenant].Publish(ctx, tasks.Event{ID: id, Type: "t", Data: []byte(`1`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// a second of its own: the counter starts now, not part-way through
	rdb.Del(ctx, keys.TenantFlow("big"))
	publish("big", "b1")
	// the second lasts while the test looks: a slow machine's pause does not end it
	rdb.PExpire(ctx, keys.TenantFlow("big"), time.Minute)
	publish("big", "b2")
	publish("big", "b3")
	publish("small", "s1")
	for i := range 4 {
		publish(tasks.DefaultTenant, fmt.Sprintf("d%d", i))
	}
	want := map[string]int{"big fresh": 3, "big backlog": 6, "small fresh": 1, "default fresh": 12}
	if got := lanes(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tasks by tenant and lane: %v; want %v", got, want)
	}
	// the next second: fresh again, and a batch of two counts 6
	rdb.PExpire(ctx, keys.TenantFlow("big"), time.Millisecond)
	testkit.Eventually(t, 5*time.Second, "big's flow counter gone", func() bool { return rdb.Exists(ctx, keys.TenantFlow("big")).Val() == 0 })
	publish("big", "b4")
	rdb.PExpire(ctx, keys.TenantFlow("big"), time.Minute)
	if _, err := tp["big"].PublishBatch(ctx, []tasks.Event{{ID: "b5", Type: "t", Data: []byte(`1`)}, {ID: "b6", Type: "t", Data: []byte(`1`)}}, nil); err != nil {
		t.Fatal(err)
	}
	want["big fresh"], want["big backlog"] = 6, 12
	if got := lanes(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a second and a batch: %v; want %v", got, want)
	}
	if n, _ := rdb.Get(ctx, keys.TenantFlow("big")).Int(); n != 9 {
		t.Errorf("big's flow this second: %d; want 9 (3, then 2 events × 3)", n)
	}
}
