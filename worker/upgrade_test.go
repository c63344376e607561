package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// v2Task is a delivery as the release before (payload version 2) queued
// it; v2Publish writes it.
type v2Task struct {
	sub       tasks.Subscriber // as this release reads it (the directory is shared)
	event     tasks.Event
	lane      string
	notBefore time.Time
}

// v2Publish writes what the release before's publish wrote for t, byte
// for byte as it did (producer.fanOutAs, limits' bookScript and
// storeEvent at 1fb4c81): the stored event as one string, the delivery
// record with its booking (g, w, q), the log entry, a fresh-lane entry,
// its waiting-index entry and pacing cursor, and the task, version 2 with
// a reference to the stored event, in the release before's queue.
func v2Publish(t *testing.T, rdb redis.UniversalClient, ns string, shards int, v2 v2Task) {
	t.Helper()
	ctx := context.Background()
	keys := tasks.Keys(ns)
	now := time.Now()
	ev := v2.event
	evJSON, _ := json.Marshal(ev)
	stored := fmt.Sprintf("%d %s\n%s", now.UnixMilli(), v2.sub.ID, evJSON)
	taskID := tasks.TaskID(v2.sub.ID, ev.ID)
	queue := keys.LegacyQueue(v2.sub.Region, v2.lane, tasks.Shard(v2.sub.ID, shards))
	k := keys.Gates(v2.sub.ID)
	leftovers := keys.LegacyLeftovers(v2.sub.ID) // waiting index, pacing cursor
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keys.LegacyEvent(ev.ID), stored, 24*time.Hour+10*time.Minute)
		rec := keys.Delivery(v2.sub.ID, ev.ID)
		p.HSet(ctx, rec, "g", v2.sub.Gen, "w", now.UnixMilli(), "q", queue, "t", ev.Type, "p", now.UnixMilli(),
			"u", max(now.UnixMilli(), v2.notBefore.UnixMilli()), "s", "pending")
		p.PExpire(ctx, rec, 48*time.Hour)
		p.XAdd(ctx, &redis.XAddArgs{Stream: k.Log, Values: []any{"e", ev.ID}})
		if v2.lane == tasks.LaneFresh {
			p.ZAdd(ctx, k.Fresh, redis.Z{Score: float64(now.Add(10 * time.Minute).UnixMilli()), Member: taskID})
		}
		p.ZAdd(ctx, leftovers[0], redis.Z{Score: float64(now.UnixMilli()), Member: taskID + "@" + queue})
		p.Set(ctx, leftovers[1], fmt.Sprintf("%.3f", float64(now.UnixMilli())+10), time.Hour)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	v2Enqueue(t, rdb, ns, shards, v2, now)
}

// v2Enqueue enqueues v2's task as the release before did, published at
// now: v2Publish's last step, and what asynq's recovery puts back of a
// task whose worker died while running it.
func v2Enqueue(t *testing.T, rdb redis.UniversalClient, ns string, shards int, v2 v2Task, now time.Time) {
	t.Helper()
	queue := tasks.Keys(ns).LegacyQueue(v2.sub.Region, v2.lane, tasks.Shard(v2.sub.ID, shards))
	data := v2.event
	data.Data = nil
	payload, _ := json.Marshal(map[string]any{"v": 2, "subscriber_id": v2.sub.ID, "gen": v2.sub.Gen, "max_attempts": 3,
		"event": data, "payload_ref": true, "enqueued_at": now, "not_before": v2.notBefore, "expires_at": now.Add(24 * time.Hour)})
	opts := []asynq.Option{asynq.TaskID(tasks.TaskID(v2.sub.ID, v2.event.ID)), asynq.Queue(queue), asynq.MaxRetry(1 << 30)} // as that release gave it
	if !v2.notBefore.IsZero() {
		opts = append(opts, asynq.ProcessAt(v2.notBefore.Truncate(time.Second).Add(time.Second)))
	}
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask(tasks.TypeDeliver, payload), opts...); err != nil {
		t.Fatal(err)
	}
}

// A rolling upgrade with work queued: what the release before left in
// Redis, written as it wrote it, is delivered by a worker of this release
// once each: tasks of both lanes, one not due yet (not before its time),
// a paused subscriber's (held until it is resumed), a deleted
// subscriber's (dropped, counted). Each is adopted into its subscriber's
// schedule and sent as this release's task, with the event stored the old
// way; the release before's leftovers are deleted at the worker's start
// and its namespace counters carried over once.
func TestPreviousReleasesQueuedWorkIsDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("upgrade")
	keys := tasks.Keys(ns)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	s := testkit.NewSink(t, nil)
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	put := func(sub tasks.Subscriber) tasks.Subscriber {
		got, err := p.PutSubscriber(ctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		rdb.HDel(ctx, keys.Gate(sub.ID), "cv") // the release before wrote no config version
		return got
	}
	a := put(tasks.Subscriber{ID: "a", URL: s.URL, EventTypes: []string{"t"}})
	held := put(tasks.Subscriber{ID: "held", URL: s.URL, EventTypes: []string{"t"}, Paused: true})
	gone := put(tasks.Subscriber{ID: "gone", URL: s.URL, EventTypes: []string{"t"}})
	if err := p.DeleteSubscriber(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	event := func(id string) tasks.Event {
		return tasks.Event{ID: id, Type: "t", Timestamp: time.Now().UTC().Truncate(time.Second), Data: json.RawMessage(`{"id":"` + id + `"}`)}
	}
	notBefore := time.Now().Add(2 * time.Second)
	for _, v2 := range []v2Task{
		{sub: a, event: event("e1"), lane: tasks.LaneFresh},
		{sub: a, event: event("e2"), lane: tasks.LaneBacklog},
		{sub: a, event: event("e3"), lane: tasks.LaneBacklog, notBefore: notBefore},
		{sub: held, event: event("e4"), lane: tasks.LaneBacklog},
		{sub: gone, event: event("e5"), lane: tasks.LaneFresh},
	} {
		v2Publish(t, rdb, ns, 1, v2)
	}
	rdb.HSet(ctx, keys.LegacyCounters(), worker.DroppedDeleted, 3)

	w, stop := startWorker(t, rdb, ns, worker.Config{})
	defer stop()
	testkit.Eventually(t, 20*time.Second, "the release before's three tasks of a delivered", func() bool { return s.Count() == 3 })
	for _, got := range s.Got() {
		var body struct {
			ID   string          `json:"id"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(got.Body, &body); err != nil || string(body.Data) != `{"id":"`+body.ID+`"}` {
			t.Fatalf("sent %s (%v); want the stored event, its data included", got.Body, err)
		}
		if body.ID == "e3" && got.At.Before(notBefore) {
			t.Fatalf("e3 sent %v before its not-before", notBefore.Sub(got.At))
		}
		if body.ID == "e4" || body.ID == "e5" {
			t.Fatalf("%s sent: a paused or deleted subscriber's task", body.ID)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the deleted subscriber's task dropped and counted, once", func() bool {
		c, err := worker.ReadCounters(ctx, rdb, ns)
		return err == nil && c[worker.DroppedDeleted] == 4
	})
	if n := w.Stats().Adopted.Load(); n != 4 {
		t.Errorf("%d tasks adopted; want 4 (e1-e4; e5's subscriber is gone)", n)
	}
	for _, id := range []string{"a", "held"} {
		if n, err := rdb.Exists(ctx, keys.LegacyLeftovers(id)...).Result(); err != nil || n != 0 {
			t.Errorf("%d of subscriber %s's leftovers of the release before still there (%v)", n, id, err)
		}
	}
	if _, err := p.Migrate(ctx, true); err != nil { // `hooklane migrate` after the old web processes are gone
		t.Fatal(err)
	}
	if c, _ := worker.ReadCounters(ctx, rdb, ns); c[worker.DroppedDeleted] != 4 {
		t.Errorf("counters after migrating again: %v; want dropped:deleted 4 (3 carried over once, 1 now)", c)
	}

	// The paused subscriber's task waits, parked, and goes on resume.
	if got, err := p.GetDelivery(ctx, "held", "e4"); err != nil || got.State == tasks.StateDelivered {
		t.Fatalf("the paused subscriber's delivery: %+v, %v; want waiting", got, err)
	}
	if err := p.SetPaused(ctx, "held", false); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the held task delivered on resume", func() bool { return s.Count() == 4 })
	for _, id := range []string{"e1", "e2", "e3"} {
		if d, err := p.GetDelivery(ctx, "a", id); err != nil || d.State != tasks.StateDelivered || d.AttemptsSpent != 1 {
			t.Errorf("delivery a/%s: %+v, %v; want delivered on its first attempt", id, d, err)
		}
	}
	// And the subscribers work in this release's layout.
	if _, err := p.Publish(ctx, event("new"), nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "a new event delivered to both", func() bool { return s.Count() == 6 })
	for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
		if n := testkit.QueueSize(t, asynq.NewInspectorFromRedisClient(rdb), keys.LegacyQueue("", lane, 0)); n != 0 {
			t.Errorf("the release before's %s queue holds %d tasks", lane, n)
		}
	}
}

// A task of the release before whose worker died after adopting it, and
// that asynq therefore runs again, finds the delivery this release's,
// here in flight: the rerun lets the task go and leaves the delivery to
// its run, whose 2xx ends it. The event is sent once.
func TestAdoptionRerunLeavesTheRunInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("readopt")
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	release := make(chan struct{})
	s := testkit.NewReceiver(t, func(_ http.ResponseWriter, r *http.Request, _ string) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	})
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "a", URL: s.URL, EventTypes: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	rdb.HDel(ctx, tasks.Keys(ns).Gate("a"), "cv") // the release before wrote no config version
	v2 := v2Task{sub: sub, event: tasks.Event{ID: "e1", Type: "t", Timestamp: time.Now().UTC().Truncate(time.Second), Data: json.RawMessage(`{}`)},
		lane: tasks.LaneBacklog}
	v2Publish(t, rdb, ns, 1, v2)
	w, stop := startWorker(t, rdb, ns, worker.Config{})
	defer stop()
	testkit.Eventually(t, 20*time.Second, "the adopted delivery's request held at the receiver", func() bool { return s.Count() == 1 })

	// asynq runs the release before's task again (its worker died before
	// it let the task go), while this release's run holds the request.
	v2Enqueue(t, rdb, ns, 1, v2, time.Now())
	insp := asynq.NewInspectorFromRedisClient(rdb)
	queue := tasks.Keys(ns).LegacyQueue(sub.Region, v2.lane, tasks.Shard(sub.ID, 1))
	testkit.Eventually(t, 20*time.Second, "the rerun of the release before's task done", func() bool {
		_, err := insp.GetTaskInfo(queue, tasks.TaskID("a", "e1"))
		return errors.Is(err, asynq.ErrTaskNotFound)
	})
	close(release)
	testkit.Eventually(t, 20*time.Second, "e1 delivered", func() bool {
		d, err := p.GetDelivery(ctx, "a", "e1")
		return err == nil && d.State == tasks.StateDelivered
	})
	testkit.Eventually(t, 20*time.Second, "the namespace settled", func() bool { return testkit.Settled(t, rdb, insp, ns) })
	if n := s.Count(); n != 1 {
		t.Fatalf("e1 sent %d times; want once: the rerun took the delivery from its run in flight", n)
	}
	if d, _ := p.GetDelivery(ctx, "a", "e1"); d.AttemptCount != 1 || w.Stats().Adopted.Load() != 1 {
		t.Fatalf("record %+v, %d adopted; want one attempt, one adoption", d, w.Stats().Adopted.Load())
	}
}

// A task of a later release's payload version is never sent: it goes back
// to its queue without spending an attempt (asynq's retry count stays 0,
// below the least MaxRetry a task is given, 1: asynq never archives one on
// its own), and is logged and counted.
func TestNewerTaskIsPutBackUnsent(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "a", URL: s.URL, EventTypes: []string{"t"}})
	queue := tasks.Keys(b.ns).DeliveryQueue("", "a", tasks.LaneFresh, 1)
	payload := []byte(`{"v":5,"subscriber_id":"a","event_id":"e1","what":"a field of a later release"}`)
	if _, err := asynq.NewClientFromRedisClient(b.rdb).Enqueue(asynq.NewTask(tasks.TypeDeliver, payload),
		asynq.TaskID("a:e1"), asynq.Queue(queue), asynq.MaxRetry(tasks.AsynqMaxRetry(1))); err != nil {
		t.Fatal(err)
	}
	var info *asynq.TaskInfo
	testkit.Eventually(t, 10*time.Second, "the newer task put back", func() bool {
		var err error
		info, err = b.insp.GetTaskInfo(queue, "a:e1")
		return err == nil && info.State == asynq.TaskStateRetry
	})
	if info.Retried != 0 || !strings.Contains(info.LastErr, "newer release") {
		t.Fatalf("put back with retried %d, error %q; want 0 and the reason", info.Retried, info.LastErr)
	}
	if until := time.Until(info.NextProcessAt); until < 50*time.Second {
		t.Errorf("looked at again in %v; want about a minute", until)
	}
	if b.w.Stats().Newer.Load() != 1 || s.Count() != 0 {
		t.Fatalf("newer counted %d, sent %d; want 1 and none", b.w.Stats().Newer.Load(), s.Count())
	}
	testkit.Eventually(t, 5*time.Second, "refused:newer_task in the totals", func() bool {
		tot, err := worker.ReadTotals(context.Background(), b.rdb, b.ns)
		return err == nil && tot["refused:newer_task"] == 1
	})
}
