package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// An event stored without a digest (by the release before, or re-stored by
// a replay) is still one event: a publish of its id with other data is
// refused, compared by the stored body's digest, and the same data
// re-serialized is a duplicate that writes the digest.
func TestEventStoredWithoutDigestStillConflicts(t *testing.T) {
	b, ctx := setup(t), context.Background()
	keys := tasks.Keys(b.ns)
	b.put(t, tasks.Subscriber{ID: "ants", URL: "https://a.test", EventTypes: []string{"ant.*"}})
	first := tasks.Event{ID: "e1", Type: "ant.created", Data: json.RawMessage(`{"name":"atta","legs":6}`),
		Timestamp: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	body := string(tasks.EventBody(first))
	ms := strconv.FormatInt(time.Now().UnixMilli(), 10)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	// e1 as the release before stored it (a string), e2 as a hash without
	// its digest
	second := first
	second.ID = "e2"
	if err := rdb.Set(ctx, keys.LegacyEvent("e1"), ms+" ants\n"+body, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, keys.Event("e2"), tasks.EventFieldBody, tasks.EventBody(second), tasks.EventFieldPublished, ms,
		tasks.EventFieldSubs, "ants").Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"e1", "e2"} {
		other := tasks.Event{ID: id, Type: "ant.created", Data: json.RawMessage(`{"name":"atta","legs":8}`)}
		res, err := b.p.Publish(ctx, other, nil)
		if !errors.Is(err, producer.ErrEventConflict) || res != nil {
			t.Fatalf("%s stored without a digest, published again with other data: %+v, %v; want ErrEventConflict", id, res, err)
		}
		if _, err := b.p.GetDelivery(ctx, "ants", id); !errors.Is(err, producer.ErrUnknownDelivery) {
			t.Fatalf("%s: the refused publish booked: %v", id, err)
		}
		same := tasks.Event{ID: id, Type: "ant.created", Data: json.RawMessage(` { "legs" : 6.0, "name": "atta" }`)}
		if _, err := b.p.Publish(ctx, same, nil); err != nil {
			t.Fatalf("%s: the same event re-serialized: %v", id, err)
		}
		want, _ := tasks.EventDigest(first.Type, first.Data)
		if got := rdb.HGet(ctx, keys.Event(id), tasks.EventFieldDigest).Val(); got != want {
			t.Fatalf("%s: digest %q after the publish, want %q", id, got, want)
		}
	}
}

// failOnce fails the first script call one of whose keys or arguments
// holds key, before it reaches Redis: a step lost to a fault.
type failOnce struct {
	key    string
	failed atomic.Bool
}

func (h *failOnce) hit(cmd redis.Cmder) bool {
	if !strings.HasPrefix(cmd.Name(), "eval") {
		return false
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, h.key) {
			return h.failed.CompareAndSwap(false, true)
		}
	}
	return false
}

func (h *failOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hit(cmd) {
			err := errors.New("injected fault")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.hit(cmd) {
				err := errors.New("injected fault")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// faulty is a producer on the namespace of b whose first script call
// holding key fails.
func (b *bundle) faulty(t *testing.T, key string) *producer.Producer {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	c.AddHook(&failOnce{key: key})
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: c, Namespace: b.ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(); c.Close() })
	return p
}

// A DELETE cut off after the directory's step, before the gate state is
// forgotten, is finished by the DELETE retried: it succeeds and removes
// the gate record and the schedule; a third answers unknown.
func TestDeleteRetriedAfterAFaultFinishes(t *testing.T) {
	b, ctx := setup(t), context.Background()
	keys := tasks.Keys(b.ns)
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	if _, err := b.p.Publish(ctx, event("e1", "t"), &producer.PublishOpts{NotBefore: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	p := b.faulty(t, keys.Gate("s"))
	if err := p.DeleteSubscriber(ctx, "s"); err == nil {
		t.Fatal("the fault was not injected: the test did not test")
	}
	if err := p.DeleteSubscriber(ctx, "s"); err != nil {
		t.Fatalf("the DELETE retried: %v; want it to finish the deletion", err)
	}
	k := keys.Gates("s")
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	if n := rdb.Exists(ctx, k.Record, k.Lot, k.Exp).Val(); n != 0 {
		t.Fatalf("%d of the gate record, lot and horizons left after the retried DELETE", n)
	}
	if err := p.DeleteSubscriber(ctx, "s"); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Fatalf("a third DELETE: %v, want ErrUnknownSubscriber", err)
	}
}

// end ends subscriber s's delivery of event ev as a worker's run does: its
// record admitted, then committed delivered or dead (with its ledger
// entry); with letGo, its task let go as asynq does then (deleted, or
// archived when dead).
func (b *bundle) end(t *testing.T, s tasks.Subscriber, ev, kind string, letGo bool) {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	g, k, tok := limits.NewGates(rdb), tasks.Keys(b.ns).Gates(s.ID), limits.NewToken()
	a, err := g.Admit(ctx, k, limits.AdmitRequest{EventID: ev, Token: tok, SlotTTL: time.Minute, Pace: b.p.Pace(s)})
	if err != nil || !a.Admitted {
		t.Fatalf("admit %s: %+v, %v", ev, a, err)
	}
	o := limits.Outcome{EventID: ev, Token: tok, Kind: kind, Dedup: time.Hour, Breaker: limits.BreakerPolicy{}.WithDefaults(),
		DeliveredAt: time.Now()}
	if kind == limits.OutcomeDead {
		se, err := b.p.StoredEvent(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		e := tasks.DeadLetter{TaskID: tasks.TaskID(s.ID, ev), SubscriberID: s.ID, Reason: "attempts", Error: "attempt 1 of 1: 500",
			DeadAt: time.Now().UTC().Truncate(time.Millisecond)}
		o.TaskID, o.DeadEntry, o.DeadAt = e.TaskID, tasks.DeadLetterPrefix(e, se.Body), e.DeadAt
	}
	q, id := b.queue(t, s, ev), tasks.TaskID(s.ID, ev)
	if _, err := g.Commit(ctx, k, o); err != nil {
		t.Fatal(err)
	}
	if !letGo {
		return
	}
	if kind == limits.OutcomeDead {
		err = b.insp.ArchiveTask(q, id)
	} else {
		err = b.insp.DeleteTask(q, id)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// queue is the asynq queue of the lane subscriber s's delivery of ev was
// last handed out in.
func (b *bundle) queue(t *testing.T, s tasks.Subscriber, ev string) string {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	shards, err := b.p.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lane := rdb.HGet(ctx, tasks.Keys(b.ns).Delivery(s.ID, ev), "q").Val()
	return tasks.Keys(b.ns).DeliveryQueue(s.Region, s.ID, lane, shards)
}

// A resend or replay whose enqueue failed leaves its delivery booked
// (pending, in the out index) with no task: the same call retried hands
// it out, rather than refusing it as still being delivered, and the
// subscriber has a turn coming at the hand-out lease's end meanwhile.
func TestResendRetriedAfterAFailedEnqueueGoes(t *testing.T) {
	for _, c := range []struct {
		name string
		kind string
		call func(p *producer.Producer) (producer.Outcome, error)
	}{
		{"resend of a delivered delivery", limits.OutcomeDelivered, func(p *producer.Producer) (producer.Outcome, error) {
			tg, err := p.Resend(context.Background(), "s", "e1")
			return tg.Outcome, err
		}},
		{"resend of a dead delivery", limits.OutcomeDead, func(p *producer.Producer) (producer.Outcome, error) {
			tg, err := p.Resend(context.Background(), "s", "e1")
			return tg.Outcome, err
		}},
		{"replay", limits.OutcomeDead, func(p *producer.Producer) (producer.Outcome, error) {
			out, _, err := p.Replay(context.Background(), producer.DeadLetterQuery{IDs: []string{"s:e1"}})
			if len(out) != 1 {
				return "", fmt.Errorf("%d outcomes, %v", len(out), err)
			}
			return out[0].Outcome, err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, ctx := setup(t), context.Background()
			keys := tasks.Keys(b.ns)
			s := b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
			if _, err := b.p.Publish(ctx, event("e1", "t"), nil); err != nil {
				t.Fatal(err)
			}
			b.end(t, s, "e1", c.kind, true)
			p := b.faulty(t, ":t:s:e1") // asynq's enqueue of the task
			if o, err := c.call(p); err == nil {
				t.Fatalf("the enqueue's fault: %s, no error; the test did not test", o)
			}
			o, err := c.call(p)
			if err != nil || o != producer.Enqueued {
				t.Fatalf("retried after the failed enqueue: %s, %v; want enqueued", o, err)
			}
			info, err := b.insp.GetTaskInfo(b.queue(t, s, "e1"), "s:e1")
			if err != nil || info.State != asynq.TaskStatePending {
				t.Fatalf("the task after the retry: %+v, %v; want it pending", info, err)
			}
			rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
			defer rdb.Close()
			if _, err := rdb.ZScore(ctx, keys.Ready(s.Region), "s").Result(); err != nil {
				t.Fatalf("no turn for s in the ready index: %v", err)
			}
		})
	}
}

// A resend that finds the delivery's old task still active when it gives
// up waiting does not report it enqueued now with nothing sent: it says it
// goes at the hand-out lease's end, and the subscriber has a turn then that
// hands it out again.
func TestResendWhileTheOldTaskStaysActiveStillMoves(t *testing.T) {
	b, ctx := setup(t), context.Background()
	keys := tasks.Keys(b.ns)
	s := b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	if _, err := b.p.Publish(ctx, event("e1", "t"), nil); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: redisSrv.Addr}, asynq.Config{Queues: map[string]int{b.queue(t, s, "e1"): 1},
		Concurrency: 1, LogLevel: asynq.FatalLevel})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		close(started)
		<-release
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	done := func() { once.Do(func() { close(release); srv.Shutdown() }) }
	defer done()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the old task was not taken in 10s")
	}
	b.end(t, s, "e1", limits.OutcomeDelivered, false) // committed; asynq has not let the task go yet
	before := time.Now()
	tg, err := b.p.Resend(ctx, "s", "e1")
	if err != nil {
		t.Fatal(err)
	}
	if tg.ProcessAt.Before(before.Add(limits.OutLease - 5*time.Second)) {
		t.Errorf("resent while the old task stayed active: %+v; want it due at the hand-out lease's end", tg)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	at, err := rdb.ZScore(ctx, keys.Ready(s.Region), "s").Result()
	if err != nil || time.UnixMilli(int64(at)).After(time.Now().Add(limits.OutLease+5*time.Second)) {
		t.Errorf("s's turn in the ready index: %v, %v; want one by the hand-out lease's end", at, err)
	}
	done()
}

// A dead letter carries the generation of its subscriber: after the
// subscriber is deleted and created again, a replay or resend of it is
// refused, saying so, and writes nothing; the old event is never sent to
// the new endpoint.
func TestReplayAfterTheSubscriberIsCreatedAgainIsRefused(t *testing.T) {
	b, ctx := setup(t), context.Background()
	keys := tasks.Keys(b.ns)
	old := b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	if _, err := b.p.Publish(ctx, event("e1", "t"), nil); err != nil {
		t.Fatal(err)
	}
	q := b.queue(t, old, "e1")
	b.end(t, old, "e1", limits.OutcomeDead, true)
	dl, _, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{Subscriber: "s"})
	if err != nil || len(dl) != 1 || dl[0].Gen != old.Gen {
		t.Fatalf("dead letters %+v, %v; want one of generation %s", dl, err, old.Gen)
	}
	if err := b.p.DeleteSubscriber(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	s := b.put(t, tasks.Subscriber{ID: "s", URL: "https://b.test"})
	out, _, err := b.p.Replay(ctx, producer.DeadLetterQuery{IDs: []string{"s:e1"}})
	if err == nil || len(out) != 1 || out[0].Outcome != producer.Failed || !strings.Contains(out[0].Error, "created again") {
		t.Fatalf("replay after the subscriber was created again: %+v, %v; want it refused", out, err)
	}
	if _, err := b.p.Resend(ctx, "s", "e1"); !errors.Is(err, producer.ErrSubscriberRecreated) {
		t.Fatalf("resend after the subscriber was created again: %v; want ErrSubscriberRecreated", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	if g := rdb.HGet(ctx, keys.Delivery("s", "e1"), "g").Val(); g != old.Gen {
		t.Fatalf("the record's generation %q after the refusals; want the old one's (%s), nothing booked for %s", g, old.Gen, s.Gen)
	}
	if info, err := b.insp.GetTaskInfo(q, "s:e1"); err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("the task after the refusals: %+v, %v; want it archived as it was", info, err)
	}
	if dl, _, _ := b.p.DeadLetters(ctx, producer.DeadLetterQuery{Subscriber: "s"}); len(dl) != 1 || !dl[0].ReplayedAt.IsZero() {
		t.Fatalf("the dead letter after the refusals: %+v; want it unreplayed", dl)
	}
}

// A replay that stores its event again (its payload expired meanwhile)
// stores its digest: a publish of the id with other data is refused.
func TestReplayStoresTheEventsDigest(t *testing.T) {
	b, ctx := setup(t), context.Background()
	keys := tasks.Keys(b.ns)
	s := b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	if _, err := b.p.Publish(ctx, event("e1", "t"), nil); err != nil {
		t.Fatal(err)
	}
	b.end(t, s, "e1", limits.OutcomeDead, true)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	rdb.Del(ctx, keys.Event("e1")) // past its retention
	if out, _, err := b.p.Replay(ctx, producer.DeadLetterQuery{IDs: []string{"s:e1"}}); err != nil || len(out) != 1 || out[0].Outcome != producer.Enqueued {
		t.Fatalf("replay: %+v, %v", out, err)
	}
	ev := event("e1", "t")
	want, _ := tasks.EventDigest(ev.Type, ev.Data)
	if got := rdb.HGet(ctx, keys.Event("e1"), tasks.EventFieldDigest).Val(); got != want {
		t.Fatalf("the replayed event's digest %q, want %q", got, want)
	}
	other := tasks.Event{ID: "e1", Type: "t", Data: json.RawMessage(`{"video_id":"other"}`)}
	if _, err := b.p.Publish(ctx, other, nil); !errors.Is(err, producer.ErrEventConflict) {
		t.Fatalf("another event under the replayed id: %v; want ErrEventConflict", err)
	}
}

// Two replays of one dead letter at once book it once: one claims the
// entry and replays it, the other is told it is a duplicate; the record
// counts one resend, and the entry is marked replayed.
func TestConcurrentReplaysOfOneEntryBookOnce(t *testing.T) {
	b, ctx := setup(t), context.Background()
	keys := tasks.Keys(b.ns)
	s := b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	const n = 10
	for i := range n {
		ev := fmt.Sprintf("e%d", i)
		if _, err := b.p.Publish(ctx, event(ev, "t"), nil); err != nil {
			t.Fatal(err)
		}
		b.end(t, s, ev, limits.OutcomeDead, true)
	}
	other := b.faulty(t, "no fault") // a second producer, as another API server
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	for i := range n {
		ev := fmt.Sprintf("e%d", i)
		var outs [2][]producer.ReplayOutcome
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j, p := range []*producer.Producer{b.p, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outs[j], _, _ = p.Replay(ctx, producer.DeadLetterQuery{IDs: []string{"s:" + ev}})
			}()
		}
		close(start)
		wg.Wait()
		// booked: handed to asynq, or (once Config.BatchAfter of s's wait
		// there with no worker to take them) parked for a turn
		booked := 0
		for _, o := range outs {
			for _, r := range o {
				if r.Outcome == producer.Enqueued || r.Outcome == producer.Scheduled {
					booked++
				}
			}
		}
		if r := rdb.HGet(ctx, keys.Delivery("s", ev), "r").Val(); r != "1" || booked != 1 {
			t.Fatalf("%s replayed twice at once: resends %q, outcomes %+v; want one booking, one booked", ev, r, outs)
		}
		if dl, _, _ := b.p.DeadLetters(ctx, producer.DeadLetterQuery{IDs: []string{"s:" + ev}, IncludeReplayed: true}); len(dl) != 1 || dl[0].ReplayedAt.IsZero() {
			t.Fatalf("%s: entry %+v; want it marked replayed", ev, dl)
		}
	}
}

// A resend of a delivery under way is still refused: one whose task waits
// in asynq, and one a run holds (waiting for its rate slot), task or not.
func TestResendOfADeliveryUnderWayIsRefused(t *testing.T) {
	b, ctx := setup(t), context.Background()
	keys := tasks.Keys(b.ns)
	s := b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	if _, err := b.p.Publish(ctx, event("e1", "t"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.Resend(ctx, "s", "e1"); !errors.Is(err, producer.ErrDeliveryActive) {
		t.Fatalf("resend while its task waits: %v; want ErrDeliveryActive", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	if err := rdb.HSet(ctx, keys.Delivery("s", "e1"), "tk", limits.NewToken()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.insp.DeleteTask(b.queue(t, s, "e1"), "s:e1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.Resend(ctx, "s", "e1"); !errors.Is(err, producer.ErrDeliveryActive) {
		t.Fatalf("resend while a run holds it: %v; want ErrDeliveryActive", err)
	}
	if _, err := b.insp.GetTaskInfo(b.queue(t, s, "e1"), "s:e1"); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("the refused resend enqueued a task: %v", err)
	}
}
