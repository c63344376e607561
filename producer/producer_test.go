package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

var redisSrv *deploy.Redis

func TestMain(m *testing.M) { testkit.Main(m, &redisSrv) }

type bundle struct {
	p    *producer.Producer
	ns   string
	insp *asynq.Inspector
}

func setup(t *testing.T) *bundle {
	t.Parallel()
	ns := testkit.Namespace("p")
	p, err := producer.New(&producer.Config{RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: redisSrv.Addr})
	t.Cleanup(func() { p.Close(); insp.Close() })
	return &bundle{p: p, ns: ns, insp: insp}
}

func (b *bundle) put(t *testing.T, s tasks.Subscriber) tasks.Subscriber {
	t.Helper()
	got, err := b.p.PutSubscriber(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func event(id, typ string) tasks.Event {
	return tasks.Event{ID: id, Type: typ, Data: json.RawMessage(`{"video_id":"vv_9f31c2"}`)}
}

func TestSubscriberCRUD(t *testing.T) {
	b, ctx := setup(t), context.Background()
	s := b.put(t, tasks.Subscriber{ID: "acme-crm", URL: "https://crm.acme.example/hooks", EventTypes: []string{"video.*"}})
	if len(s.Secrets) != 1 || tasks.ValidateSecret(s.Secrets[0]) != nil {
		t.Fatalf("generated secrets = %v", s.Secrets)
	}
	if s.Limit != limits.DefaultLimit || s.MaxInFlight != tasks.DefaultMaxInFlight {
		t.Fatalf("defaults not applied: %+v", s)
	}
	got, err := b.p.GetSubscriber(ctx, "acme-crm")
	if err != nil || got.URL != s.URL || got.Secrets[0] != s.Secrets[0] || got.Paused {
		t.Fatalf("GetSubscriber = %+v, %v", got, err)
	}
	if err := b.p.SetPaused(ctx, "acme-crm", true); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.p.GetSubscriber(ctx, "acme-crm"); !got.Paused {
		t.Fatal("not paused after SetPaused(true)")
	}
	b.put(t, tasks.Subscriber{ID: "b", URL: "http://127.0.0.1:9/x"})
	all, err := b.p.ListSubscribers(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("ListSubscribers = %d, %v", len(all), err)
	}
	if err := b.p.DeleteSubscriber(ctx, "acme-crm"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.GetSubscriber(ctx, "acme-crm"); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Fatalf("after delete: %v, want ErrUnknownSubscriber", err)
	}
	if err := b.p.DeleteSubscriber(ctx, "acme-crm"); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Fatalf("second delete: %v, want ErrUnknownSubscriber", err)
	}
}

func TestValidationErrors(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://example.test/h"})
	subTests := []struct {
		name  string
		s     tasks.Subscriber
		field string
	}{
		{"empty id", tasks.Subscriber{URL: "https://a.test"}, "subscriber_id"},
		{"long id", tasks.Subscriber{ID: strings.Repeat("x", 65), URL: "https://a.test"}, "subscriber_id"},
		{"colon in id", tasks.Subscriber{ID: "a:b", URL: "https://a.test"}, "subscriber_id"},
		{"ftp url", tasks.Subscriber{ID: "a", URL: "ftp://a.test/x"}, "url"},
		{"relative url", tasks.Subscriber{ID: "a", URL: "/hooks"}, "url"},
		{"credentials in url", tasks.Subscriber{ID: "a", URL: "https://u:p@a.test/"}, "url"},
		{"not a url", tasks.Subscriber{ID: "a", URL: "http://[::1"}, "url"},
		{"bad secret", tasks.Subscriber{ID: "a", URL: "https://a.test", Secrets: []string{"hunter2"}}, "secrets"},
		{"short secret", tasks.Subscriber{ID: "a", URL: "https://a.test", Secrets: []string{"whsec_AAAA"}}, "secrets"},
		{"bad filter", tasks.Subscriber{ID: "a", URL: "https://a.test", EventTypes: []string{"*"}}, "event_types"},
		{"zero rate", tasks.Subscriber{ID: "a", URL: "https://a.test", Limit: limits.Limit{Burst: 1, Period: time.Second}}, "limit"},
		{"negative in-flight", tasks.Subscriber{ID: "a", URL: "https://a.test", MaxInFlight: -1}, "max_in_flight"},
	}
	for _, tt := range subTests {
		_, err := b.p.PutSubscriber(ctx, tt.s)
		if !errors.Is(err, producer.ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: err = %v, want ErrInvalid naming %s", tt.name, err, tt.field)
		}
	}
	evTests := []struct {
		name string
		ev   tasks.Event
		want error
	}{
		{"empty id", event("", "video.trending"), producer.ErrInvalid},
		{"long id", event(strings.Repeat("e", 129), "video.trending"), producer.ErrInvalid},
		{"space in id", event("evt 1", "video.trending"), producer.ErrInvalid},
		{"empty type", event("e1", ""), producer.ErrInvalid},
		{"no data", tasks.Event{ID: "e1", Type: "t"}, producer.ErrInvalid},
		{"data not json", tasks.Event{ID: "e1", Type: "t", Data: json.RawMessage(`{`)}, producer.ErrInvalid},
		{"oversized", tasks.Event{ID: "e1", Type: "t", Data: json.RawMessage(`"` + strings.Repeat("x", 256<<10) + `"`)}, producer.ErrPayloadTooLarge},
		{"hooklane's own type", event("e1", tasks.OperatorFailing), producer.ErrInvalid},
	}
	for _, tt := range evTests {
		if _, err := b.p.Publish(ctx, tt.ev, nil); !errors.Is(err, tt.want) {
			t.Errorf("Publish %s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := b.p.SendTo(ctx, "s", event("e1", tasks.OperatorRecovered), nil); !errors.Is(err, producer.ErrInvalid) {
		t.Errorf("SendTo of hooklane's own type: %v, want ErrInvalid", err)
	}
	if _, err := b.p.PublishOperatorEvent(ctx, event("e1", "video.trending")); !errors.Is(err, producer.ErrInvalid) {
		t.Errorf("PublishOperatorEvent of an app type: %v, want ErrInvalid", err)
	}
	if _, err := b.p.SendTo(ctx, "nobody", event("e1", "t"), nil); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Errorf("SendTo unknown: %v", err)
	}
	// None of the refused calls wrote a task.
	if n := testkit.Totals(t, b.insp, b.ns).Size; n != 0 {
		t.Errorf("queue has %d tasks after refused publishes", n)
	}
}

func TestRedisDownAtPublish(t *testing.T) {
	t.Parallel()
	p, err := producer.New(&producer.Config{RedisConfig: deploy.RedisConfig{URL: "redis://127.0.0.1:1/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	if _, err := p.Publish(ctx, event("e1", "t"), nil); !errors.Is(err, producer.ErrRedisUnavailable) {
		t.Fatalf("Publish: %v, want ErrRedisUnavailable", err)
	}
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "a", URL: "https://a.test"}); !errors.Is(err, producer.ErrRedisUnavailable) {
		t.Fatalf("PutSubscriber: %v, want ErrRedisUnavailable", err)
	}
}

func TestPublishFanOutAndDuplicates(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "all", URL: "https://a.test"})
	b.put(t, tasks.Subscriber{ID: "videos", URL: "https://b.test", EventTypes: []string{"video.*"}})
	b.put(t, tasks.Subscriber{ID: "exact", URL: "https://c.test", EventTypes: []string{"video.uploaded"}})
	b.put(t, tasks.Subscriber{ID: "paused", URL: "https://d.test", Paused: true})

	res, err := b.p.Publish(ctx, event("evt_1", "video.trending"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]producer.Outcome{}
	for _, tg := range res.Targets {
		got[tg.SubscriberID] = tg.Outcome
	}
	// A paused subscriber's event is held for it, not left out.
	want := map[string]producer.Outcome{"all": producer.Enqueued, "paused": producer.Held, "videos": producer.Enqueued}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("targets = %v, want %v", got, want)
	}
	res, err = b.p.Publish(ctx, event("evt_1", "video.trending"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Targets) != 3 {
		t.Fatalf("re-publish: %d targets, want the same 3", len(res.Targets))
	}
	for _, tg := range res.Targets {
		if tg.Outcome != producer.Duplicate {
			t.Fatalf("re-publish: %s = %s, want duplicate", tg.SubscriberID, tg.Outcome)
		}
	}
	info, err := testkit.Task(b.insp, b.ns, tasks.TaskID("videos", "evt_1"))
	if err != nil {
		t.Fatal(err)
	}
	// hooklane counts the attempts (8 by default); asynq must never
	// archive on its own, nor keep a delivered task (the delivery record
	// is the dedup marker).
	if info.MaxRetry != tasks.AsynqMaxRetry || info.Retention != 0 {
		t.Fatalf("task MaxRetry %d Retention %v, want %d and none", info.MaxRetry, info.Retention, tasks.AsynqMaxRetry)
	}
	var d tasks.Delivery
	if err := json.Unmarshal(info.Payload, &d); err != nil || d.ExpiresAt.Sub(d.EnqueuedAt) != 24*time.Hour ||
		d.MaxAttempts != 8 || d.V != tasks.DeliveryVersion || d.Gen == "" {
		t.Fatalf("payload %s: %v; want max_attempts 8, version %d and a generation", info.Payload, err, tasks.DeliveryVersion)
	}
	if strings.Contains(string(info.Payload), "whsec_") {
		t.Fatal("task payload carries a secret")
	}
	// The event's data is stored once, for every subscriber: the tasks
	// refer to it.
	if strings.Contains(string(info.Payload), "vv_9f31c2") || !d.PayloadRef {
		t.Fatalf("task payload %s carries the event's data", info.Payload)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	v, err := rdb.Get(ctx, tasks.Keys(b.ns).Event("evt_1")).Result()
	if ev, subs, _, ok := tasks.ParseStoredEvent(v); err != nil || !ok || strings.Count(v, "vv_9f31c2") != 1 ||
		fmt.Sprint(subs) != "[all paused videos]" || ev.Type != "video.trending" {
		t.Fatalf("stored event %q, %v; want it once with its three subscribers", v, err)
	}
	// Kept for the payload retention, or as long as a task may need it:
	// the retry horizon and its margin.
	if ttl := rdb.PTTL(ctx, tasks.Keys(b.ns).Event("evt_1")).Val(); ttl < 24*time.Hour+producer.EventMargin-time.Minute || ttl > 24*time.Hour+producer.EventMargin {
		t.Fatalf("stored event's ttl %v; want the 24h horizon and %v", ttl, producer.EventMargin)
	}
	short, err := producer.New(&producer.Config{RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: b.ns, PayloadRetention: 72 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	if _, err := short.Publish(ctx, event("evt_2", "video.trending"), nil); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, tasks.Keys(b.ns).Event("evt_2")).Val(); ttl < 71*time.Hour {
		t.Fatalf("stored event's ttl %v; want the 72h payload retention", ttl)
	}
}

// Skipping paused subscribers is an explicit choice, reported per target,
// and writes nothing for them.
func TestSkipPausedLeavesPausedOutAndSaysSo(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "on", URL: "https://a.test"})
	b.put(t, tasks.Subscriber{ID: "off", URL: "https://b.test", Paused: true})
	res, err := b.p.Publish(ctx, event("e1", "t"), &producer.PublishOpts{SkipPaused: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]producer.Outcome{}
	for _, tg := range res.Targets {
		got[tg.SubscriberID] = tg.Outcome
	}
	if want := map[string]producer.Outcome{"off": producer.Skipped, "on": producer.Enqueued}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("targets = %v, want %v", got, want)
	}
	if _, err := testkit.Task(b.insp, b.ns, tasks.TaskID("off", "e1")); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("skipped target's task: %v; want none", err)
	}
	// Published again without the option, the event is held for it: the
	// skip booked nothing (no marker makes it a duplicate).
	res, err = b.p.SendTo(ctx, "off", event("e1", "t"), nil)
	if err != nil || res.Targets[0].Outcome != producer.Held {
		t.Fatalf("SendTo the paused subscriber: %+v, %v; want held", res, err)
	}
}

func TestNotBeforeSchedulesRoundedUp(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	nb := time.Now().Add(90 * time.Second).Add(300 * time.Millisecond)
	res, err := b.p.Publish(ctx, event("e", "t"), &producer.PublishOpts{NotBefore: nb})
	if err != nil {
		t.Fatal(err)
	}
	info, err := testkit.Task(b.insp, b.ns, res.Targets[0].TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != asynq.TaskStateScheduled || info.NextProcessAt.Before(nb) {
		t.Fatalf("state %v next %v; want scheduled no earlier than %v", info.State, info.NextProcessAt, nb)
	}
}

func TestBurstIsPacedAtPublish(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test", Limit: limits.Limit{Rate: 2, Burst: 2, Period: time.Second}})
	var at []time.Time
	for i := range 8 {
		res, err := b.p.Publish(ctx, event(fmt.Sprintf("e%d", i), "t"), nil)
		if err != nil {
			t.Fatal(err)
		}
		at = append(at, res.Targets[0].ProcessAt)
	}
	// Two go at once (the burst); the rest are booked 500ms apart, so the
	// last of eight has the slot 3s out instead of now. Its task comes due
	// up to PacingLead before the slot, in asynq's whole seconds: 1.5-2.5s.
	if !at[0].IsZero() || !at[1].IsZero() {
		t.Fatalf("burst events scheduled: %v", at[:2])
	}
	if last := time.Until(at[7]); last < 1400*time.Millisecond || last > 2600*time.Millisecond {
		t.Fatalf("8th event due in %v, want 1.5-2.5s (its slot 3s out, less the lead)", last)
	}
}

func TestPutKeepsSecretsAndReportsCreation(t *testing.T) {
	b, ctx := setup(t), context.Background()
	s, created, err := b.p.UpsertSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "https://a.test/h"})
	if err != nil || !created || len(s.Secrets) != 1 {
		t.Fatalf("create: %+v, created %v, %v", s, created, err)
	}
	again, created, err := b.p.UpsertSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "https://b.test/h"})
	if err != nil || created || again.URL != "https://b.test/h" || fmt.Sprint(again.Secrets) != fmt.Sprint(s.Secrets) {
		t.Fatalf("replace without secrets: %+v, created %v, %v; want the URL changed and the secret kept", again, created, err)
	}
	sec, _ := tasks.NewSecret()
	given := b.put(t, tasks.Subscriber{ID: "s", URL: "https://b.test/h", Secrets: []string{sec}})
	if fmt.Sprint(given.Secrets) != fmt.Sprint([]string{sec}) {
		t.Fatalf("replace with secrets kept %v", given.Secrets)
	}
}

func TestRotateSecret(t *testing.T) {
	b, ctx := setup(t), context.Background()
	old := b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test/h", Paused: true}).Secrets[0]
	s, sec, err := b.p.RotateSecret(ctx, "s", time.Hour)
	if err != nil || tasks.ValidateSecret(sec) != nil || sec == old {
		t.Fatalf("RotateSecret: %q, %v", sec, err)
	}
	if len(s.Retiring) != 1 || s.Retiring[0].Secret != old || time.Until(s.Retiring[0].Until) < 59*time.Minute || !s.Paused {
		t.Fatalf("after rotation: %+v", s)
	}
	stored, _ := b.p.GetSubscriber(ctx, "s")
	if got := stored.SigningSecrets(time.Now()); fmt.Sprint(got) != fmt.Sprint([]string{sec, old}) {
		t.Fatalf("signing secrets %v, want new then old", got)
	}
	if got := stored.SigningSecrets(time.Now().Add(2 * time.Hour)); fmt.Sprint(got) != fmt.Sprint([]string{sec}) {
		t.Fatalf("after the grace: %v, want only the new secret", got)
	}
	// Each rotation adds retiring secrets until the cap; grace 0 clears them.
	for range tasks.MaxSecrets - 2 {
		if _, _, err := b.p.RotateSecret(ctx, "s", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := b.p.RotateSecret(ctx, "s", time.Hour); !errors.Is(err, producer.ErrTooManySecrets) {
		t.Fatalf("rotation past the cap: %v, want ErrTooManySecrets", err)
	}
	s, sec, err = b.p.RotateSecret(ctx, "s", 0)
	if err != nil || len(s.Retiring) != 0 || fmt.Sprint(s.Secrets) != fmt.Sprint([]string{sec}) {
		t.Fatalf("grace 0: %+v, %v", s, err)
	}
	if _, _, err := b.p.RotateSecret(ctx, "nobody", time.Hour); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Fatalf("unknown: %v", err)
	}
	if _, _, err := b.p.RotateSecret(ctx, "s", -time.Second); !errors.Is(err, producer.ErrInvalid) {
		t.Fatalf("negative grace: %v", err)
	}
}

// A re-publish books no pacing slot: the events after it are paced as if
// it had not happened.
func TestRepublishBooksNoPacingSlot(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test", Limit: limits.Limit{Rate: 1, Burst: 1, Period: time.Second}})
	var due []time.Time
	for round := range 3 { // publish e0-e4, then the same five twice more
		for i := range 5 {
			res, err := b.p.Publish(ctx, event(fmt.Sprintf("e%d", i), "t"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := producer.Enqueued; round > 0 {
				want = producer.Duplicate
				if res.Targets[0].Outcome != want {
					t.Fatalf("round %d, e%d: %s, want %s", round, i, res.Targets[0].Outcome, want)
				}
			} else {
				due = append(due, res.Targets[0].ProcessAt)
			}
		}
	}
	res, err := b.p.Publish(ctx, event("e5", "t"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// At one a second, e5 is due a second after e4: not ten seconds more
	// for the ten duplicates.
	if gap := res.Targets[0].ProcessAt.Sub(due[4]); gap < 0 || gap > 2*time.Second {
		t.Fatalf("e5 due %v after e4; want about a second (the duplicates booked nothing)", gap)
	}
}

// The worker lists a dead letter in the global index just before it writes
// the entry: a reader that meets such a fresh member without its entry
// leaves it; an old one without an entry (expired, deleted) it drops.
func TestListingKeepsFreshIndexMembersWithoutEntries(t *testing.T) {
	b, ctx := setup(t), context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	idx := tasks.Keys(b.ns).AllDeadIndex()
	now := time.Now()
	rdb.ZAdd(ctx, idx, redis.Z{Score: float64(now.UnixMilli()), Member: "s:fresh"},
		redis.Z{Score: float64(now.Add(-time.Hour).UnixMilli()), Member: "s:old"})
	if dl, _, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{}); err != nil || len(dl) != 0 {
		t.Fatalf("DeadLetters = %+v, %v; want none (neither has an entry)", dl, err)
	}
	left, err := rdb.ZRange(ctx, idx, 0, -1).Result()
	if err != nil || fmt.Sprint(left) != "[s:fresh]" {
		t.Fatalf("index after a read: %v, %v; want the fresh member kept and the old one dropped", left, err)
	}
}

// WaitReplicas: refused where it cannot hold (a Cluster, a wait the
// client's read timeout would cut), and on a server without replicas every
// publish fails with ErrNotReplicated, the re-publish too: a duplicate of
// an unreplicated task is no more durable than the first.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}) // never dialed
	defer cluster.Close()
	short := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, ReadTimeout: 500 * time.Millisecond})
	defer short.Close()
	for _, c := range []struct {
		name string
		cfg  producer.Config
		want string
	}{
		{"cluster client", producer.Config{Redis: cluster, WaitReplicas: 1}, "Redis Cluster"},
		{"cluster config", producer.Config{RedisConfig: deploy.RedisConfig{ClusterAddrs: []string{"127.0.0.1:1"}}, WaitReplicas: 1}, "Redis Cluster"},
		{"wait past the read timeout", producer.Config{Redis: short, WaitReplicas: 1, WaitTimeout: time.Second}, "ReadTimeout"},
		{"sub-millisecond wait", producer.Config{Redis: short, WaitReplicas: 1, WaitTimeout: time.Microsecond}, "WaitTimeout"},
		{"negative", producer.Config{Redis: short, WaitReplicas: -1}, "WaitReplicas"},
	} {
		if _, err := producer.New(&c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v, want an error naming %s", c.name, err, c.want)
		}
	}

	ns := testkit.Namespace("wait")
	p, err := producer.New(&producer.Config{Redis: short, Namespace: ns, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "https://a.test/h"}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		res, err := p.Publish(ctx, event("e1", "t"), nil)
		if !errors.Is(err, producer.ErrNotReplicated) || len(res.Targets) != 1 || res.Targets[0].Outcome != producer.Failed ||
			!errors.Is(res.Targets[0].Err, producer.ErrNotReplicated) {
			t.Fatalf("publish %d without a replica: %+v, %v; want the target failed with ErrNotReplicated", i+1, res, err)
		}
	}
}

// A woken task can be parked again before the wake has cleaned up its
// index entry (its breaker reopened, or it was throttled): the entry it
// wrote anew must survive, or the next wake does not find it and the task
// sleeps until its own far wake-up (a flapping endpoint's events were left
// undelivered for a minute this way).
func TestWakeKeepsEntriesParkedAnew(t *testing.T) {
	b, ctx := setup(t), context.Background()
	// A minute apart: none comes due (and goes pending) during the test.
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test", Limit: limits.Limit{Rate: 1, Burst: 1, Period: time.Minute}})
	for i := range 4 {
		if _, err := b.p.Publish(ctx, event(fmt.Sprintf("e%d", i), "t"), nil); err != nil {
			t.Fatal(err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	k := tasks.Keys(b.ns).Gates("s")
	snap, err := limits.NewGates(rdb).WaitingAll(ctx, k)
	if err != nil || len(snap) != 3 {
		t.Fatalf("waiting index = %v, %v; want the 3 events past the burst", snap, err)
	}
	// The first is parked anew, as its handler would after being woken.
	again := redis.Z{Score: snap[0].Score + 60_000, Member: snap[0].Member}
	rdb.ZAdd(ctx, k.Waiting, again)
	woken, busy, err := b.p.WakeMembers(ctx, "s", snap)
	if err != nil || woken != len(snap) || len(busy) != 0 {
		t.Fatalf("WakeMembers = %d woken, %d busy, %v; want %d, 0", woken, len(busy), err, len(snap))
	}
	left, err := rdb.ZRangeWithScores(ctx, k.Waiting, 0, -1).Result()
	if err != nil || len(left) != 1 || left[0] != again {
		t.Fatalf("waiting index after the wake = %v, %v; want only the entry parked anew, %v", left, err, again)
	}
}
