package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// A run waits in the process at most MaxWait plus its reservation in all,
// however its rate slot and its in-flight slot bind by turns: here every
// Admit after a wait for its rate slot finds the one slot taken, and every
// Admit in the busy lane finds it free and books the next rate slot (the
// slot is taken and freed in Redis between the run's own Admit calls, as
// other processes' runs would). Each turn of that is shorter than either
// wait, so a run given a fresh MaxWait on each return to the busy lane
// cycled until the slot stayed free (seen without the bound: 25 Admits in
// 6.0 s, admitted once the test stopped taking the slot); the bound parks
// it for its rate once its next rate slot lies past it (8 Admits, 1.6 s).
func TestRunWaitsAtMostOneWaitOfEachInAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := startRedis(t)
	ns := testkit.Namespace("waitbound")
	const maxWait = 300 * time.Millisecond
	w, err := New(Config{Redis: rdb, Namespace: ns, MaxWait: maxWait, AllowedCIDRs: testkit.Loopback})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.closeRDB() })
	h := w.h
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns, AllowedCIDRs: testkit.Loopback, MaxWait: maxWait})
	if err != nil {
		t.Fatal(err)
	}
	limit := limits.Limit{Rate: 2, Burst: 1, Period: time.Second}
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "http://127.0.0.1:9/", Limit: limit, MaxInFlight: 1, EventTypes: []string{"e"}}); err != nil {
		t.Fatal(err)
	}
	// published with no worker running: its task waits in asynq, and the
	// test runs the handler's admission on it by hand
	if _, err := p.Publish(ctx, tasks.Event{ID: "e1", Type: "e", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	keys := h.keys.Gates("s")
	// another run's in-flight slot, taken and freed by hand
	take := func() {
		rdb.ZAdd(ctx, keys.InFlight, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "other"})
	}
	free := func() { rdb.ZRem(ctx, keys.InFlight, "other") }
	const most = 24 // then the slot stays free: a run without the bound ends admitted
	calls, busy, sendIn := 0, 0, 0
	admit := func(ctx context.Context, rs []limits.AdmitRequest) ([]limits.Admission, error) {
		calls++
		switch {
		case calls >= most:
			free()
		case calls == 1 || rs[0].Reserved:
			take()
		default:
			free()
			if calls == 2 { // the first wait for a rate slot: the one slot of the second is taken
				if _, err := redis_rate.NewLimiter(rdb).Allow(ctx, h.keys.RateLimiterKey("s"), limit.RedisRate()); err != nil {
					return nil, err
				}
			}
		}
		as, err := h.gates.AdmitGroup(ctx, keys, rs)
		if err == nil {
			if as[0].Busy {
				busy++
			}
			if as[0].SendIn > 0 {
				sendIn++
			}
		}
		return as, err
	}
	commit := func(ctx context.Context, os []limits.Outcome) ([]limits.Committed, error) {
		return h.gates.CommitGroup(ctx, keys, os)
	}
	notify := func(ctx context.Context, ats []time.Time) ([]struct{}, error) {
		return make([]struct{}, len(ats)), h.gates.Notify(ctx, h.keys.Ready(tasks.DefaultRegion), "s", ats[0])
	}
	r := &run{taskID: tasks.TaskID("s", "e1"), queue: h.keys.ShardQueue(tasks.DefaultRegion, tasks.LaneFresh, 0), sub: "s", event: "e1", keys: keys,
		batch: newBatchCalls(1, admit, commit, notify)}
	sub, err := h.subscriber(ctx, "s", "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = h.admit(ctx, r, &sub)
	waited := time.Since(start)
	reserve := maxWait + limits.DefaultLead
	t.Logf("admission ended after %v (bound %v): %v; %d Admits, %d busy, %d rate slots booked", waited, maxWait+reserve, err, calls, busy, sendIn)
	if !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("the run ended %v after %d Admits; want parked (asynq.RevokeTask)", err, calls)
	}
	if calls >= most || sendIn < 2 {
		t.Fatalf("%d Admits, %d rate slots booked: the run did not cycle between its two waits and stop", calls, sendIn)
	}
	// a second of slack for the Admits' own round trips on a loaded machine
	if waited > maxWait+reserve+time.Second {
		t.Errorf("the run waited %v in the process; at most MaxWait + its reservation (%v)", waited, maxWait+reserve)
	}
	if s := rdb.HGet(ctx, h.keys.Delivery("s", "e1"), "s").Val(); s != tasks.StateScheduled {
		t.Errorf("e1's record is %s; want %s (parked)", s, tasks.StateScheduled)
	}
	if rdb.ZScore(ctx, keys.Lot, "e1").Err() != nil {
		t.Error("e1 is not in its lot")
	}
}
