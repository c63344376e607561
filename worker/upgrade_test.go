package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
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
	for _, id := range []string{"old", "held"} {
		oldSubscriber(t, rdb, ns, id, s.URL, secret)
	}
	rdb.SAdd(ctx, v1.Paused(), "held")
	cooling := time.Now().Add(3 * time.Second)
	rdb.Set(ctx, v1.Cooldown("old"), strconv.FormatInt(cooling.UnixMilli(), 10), time.Minute)
	for _, id := range []string{"e1", "e2", "e3"} {
		oldTask(t, rdb, ns, "old", id)
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

// oldSubscriber writes a subscriber as the release before's API did: its
// JSON (the paused field always false) in one hash.
func oldSubscriber(t *testing.T, rdb redis.UniversalClient, ns, id, url, secret string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"id": id, "url": url, "secrets": []string{secret}, "event_types": []string{},
		"limit": map[string]any{"rate": 100, "burst": 100, "period": "1s"}, "max_in_flight": 10, "paused": false})
	if err := rdb.HSet(context.Background(), tasks.Keys(ns).V1().Subscribers(), id, b).Err(); err != nil {
		t.Fatal(err)
	}
}

// oldTask enqueues a delivery as the release before did: payload without
// a version, in the namespace's one queue, MaxRetry = attempts.
func oldTask(t *testing.T, rdb redis.UniversalClient, ns, sub, eventID string) {
	t.Helper()
	d, _ := json.Marshal(map[string]any{"subscriber_id": sub, "event": tasks.Event{ID: eventID, Type: "t", Data: json.RawMessage(`{"v":1}`)},
		"enqueued_at": time.Now(), "expires_at": time.Now().Add(time.Hour)})
	c := asynq.NewClientFromRedisClient(rdb)
	if _, err := c.Enqueue(asynq.NewTask(tasks.TypeDeliver, d), asynq.Queue(ns), asynq.TaskID(sub+":"+eventID), asynq.MaxRetry(8),
		asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// During a rolling upgrade the release before's API and producers keep
// writing after this release's workers started: a task in its queue,
// enqueued once the worker runs (its Server for that queue starts then),
// for a subscriber the old API created after the migration (carried over
// when its task comes) is delivered; a subscriber deleted through this
// release stays deleted (its task is dropped, not the subscriber
// resurrected from the old copy).
func TestOldReleaseWritingDuringTheUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("overlap")
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	s := testkit.NewSink(t, nil)
	secret, _ := tasks.NewSecret()
	oldSubscriber(t, rdb, ns, "early", s.URL, secret)
	oldSubscriber(t, rdb, ns, "gone", s.URL, secret)
	_, stop := startWorker(t, rdb, ns, worker.Config{})
	defer stop()
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the old subscribers migrated", func() bool {
		_, err := p.GetSubscriber(ctx, "gone")
		return err == nil
	})
	if err := p.DeleteSubscriber(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	oldSubscriber(t, rdb, ns, "late", s.URL, secret)
	oldTask(t, rdb, ns, "early", "e1")
	oldTask(t, rdb, ns, "late", "e2")
	oldTask(t, rdb, ns, "gone", "e3")
	keys := tasks.Keys(ns)
	testkit.Eventually(t, 30*time.Second, "the old queue's tasks delivered or dropped", func() bool {
		return s.Count() == 2 && rdb.HGet(ctx, keys.Counters(), worker.DroppedDeleted).Val() == "1"
	})
	for _, a := range s.Got() {
		if a.ID == "e3" {
			t.Fatal("a deleted subscriber's task of the old queue was sent")
		}
	}
	if _, err := p.GetSubscriber(ctx, "gone"); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Fatalf("the deleted subscriber after its old task: %v; want still unknown", err)
	}
	if late, err := p.GetSubscriber(ctx, "late"); err != nil || late.URL != s.URL {
		t.Fatalf("the subscriber the old API created during the upgrade: %+v, %v", late, err)
	}
}

// `hooklane migrate` carries over what the release before's API wrote after
// the workers migrated the namespace (a subscriber created meanwhile) and
// leaves what this release changed since (a subscriber's new URL) alone.
func TestMigrateCommandCarriesOverLateWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("migrate")
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	secret, _ := tasks.NewSecret()
	oldSubscriber(t, rdb, ns, "a", "https://a.test/old", secret)
	migrate := func() string {
		t.Helper()
		cmd := exec.Command(hooklaneBin(t), "migrate")
		cmd.Env = []string{"REDIS_URL=" + redisURL(), "HOOKLANE_NAMESPACE=" + ns}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("hooklane migrate: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := migrate(); got != `{"subscribers":1,"dead_letters":0,"cooldowns":0}` {
		t.Fatalf("first migrate reported %s; want one subscriber", got)
	}
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.GetSubscriber(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	a.URL = "https://a.test/new"
	if _, err := p.PutSubscriber(ctx, a); err != nil {
		t.Fatal(err)
	}
	oldSubscriber(t, rdb, ns, "b", "https://b.test/", secret)
	if got := migrate(); got != `{"subscribers":1,"dead_letters":0,"cooldowns":0}` {
		t.Fatalf("second migrate reported %s; want the one created since", got)
	}
	if b, err := p.GetSubscriber(ctx, "b"); err != nil || b.URL != "https://b.test/" {
		t.Fatalf("the subscriber created by the old API after the migration: %+v, %v", b, err)
	}
	if a, err := p.GetSubscriber(ctx, "a"); err != nil || a.URL != "https://a.test/new" {
		t.Fatalf("the subscriber changed since the migration: %+v, %v; want its new URL kept", a, err)
	}
}
