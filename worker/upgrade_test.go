package worker_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A rolling upgrade with work queued: what the release before (layout 1)
// left in Redis, written here exactly as it wrote it, is delivered by a
// worker of this release: its subscribers (with their pause), a running
// Retry-After cooldown, its dead letters, and its tasks (payload without
// a version, in its one queue).
func TestPreviousReleasesQueuedWorkIsDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("upgrade")
	v1 := tasks.Keys(ns).V1()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	s := testkit.NewSink(t, nil)
	secret, _ := tasks.NewSecret()
	// The release before stored the subscriber JSON (its paused field always
	// false) in one hash, pauses in a set, cooldowns per subscriber.
	for id, url := range map[string]string{"old": s.URL, "held": s.URL} {
		b, _ := json.Marshal(map[string]any{"id": id, "url": url, "secrets": []string{secret}, "event_types": []string{},
			"limit": map[string]any{"rate": 100, "burst": 100, "period": "1s"}, "max_in_flight": 10, "paused": false})
		rdb.HSet(ctx, v1.Subscribers(), id, b)
	}
	rdb.SAdd(ctx, v1.Paused(), "held")
	cooling := time.Now().Add(3 * time.Second)
	rdb.Set(ctx, v1.Cooldown("old"), strconv.FormatInt(cooling.UnixMilli(), 10), time.Minute)
	// Its tasks: payload version 1, queue = namespace, MaxRetry = attempts.
	c := asynq.NewClientFromRedisClient(rdb)
	for _, id := range []string{"e1", "e2", "e3"} {
		d, _ := json.Marshal(map[string]any{"subscriber_id": "old", "event": tasks.Event{ID: id, Type: "t", Data: json.RawMessage(`{"v":1}`)},
			"enqueued_at": time.Now(), "expires_at": time.Now().Add(time.Hour)})
		if _, err := c.Enqueue(asynq.NewTask(tasks.TypeDeliver, d), asynq.Queue(ns), asynq.TaskID("old:"+id), asynq.MaxRetry(8),
			asynq.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	// And a dead letter of its ledger.
	dl, _ := json.Marshal(tasks.DeadLetter{TaskID: "old:gone", SubscriberID: "old", Event: &tasks.Event{ID: "gone", Type: "t", Data: json.RawMessage(`1`)},
		Reason: "attempts", Error: "attempt 8 of 8: HTTP 500", DeadAt: time.Now().Add(-time.Hour)})
	rdb.Set(ctx, v1.DeadLetter("old:gone"), dl, 0)
	rdb.RPush(ctx, v1.Attempts("old:gone"), `{"at":"2026-11-30T08:00:00Z","status":500}`)
	rdb.ZAdd(ctx, v1.DeadIndex(), redis.Z{Score: float64(time.Now().Add(-time.Hour).UnixMilli()), Member: "old:gone"})

	_, stop := startWorker(t, rdb, ns, worker.Config{})
	defer stop()
	testkit.Eventually(t, 20*time.Second, "the release before's three tasks delivered", func() bool { return s.Count() == 3 })
	for _, a := range s.Got() {
		if a.At.Before(cooling) {
			t.Fatalf("%s arrived %v before the cooldown the release before had recorded", a.ID, cooling.Sub(a.At))
		}
	}
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.GetSubscriber(ctx, "held")
	if err != nil || !held.Paused || held.PauseReason != tasks.PauseOperator {
		t.Fatalf("the paused subscriber after the upgrade: %+v, %v; want still paused", held, err)
	}
	dead, _, err := p.DeadLetters(ctx, producer.DeadLetterQuery{Subscriber: "old"})
	if err != nil || len(dead) != 1 || dead[0].TaskID != "old:gone" || len(dead[0].Attempts) != 1 {
		t.Fatalf("the old ledger after the upgrade: %+v, %v", dead, err)
	}
	// And the subscriber works in the new layout.
	if _, err := p.Publish(ctx, tasks.Event{ID: "new", Type: "t", Data: json.RawMessage(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "a new event delivered", func() bool { return s.Count() == 4 })
	// The old keys are left for a rollback.
	if n, _ := rdb.Exists(ctx, v1.Subscribers(), v1.Paused(), v1.DeadLetter("old:gone")).Result(); n != 3 {
		t.Fatalf("%d of the release before's 3 keys left; a rollback needs them", n)
	}
}
