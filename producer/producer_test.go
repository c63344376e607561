package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
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
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: ns})
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

// serve marks namespace ns's default region served, as a running worker
// does (worker/serving.go): a publish hands events to asynq as it does
// when a worker will take them at once.
func serve(t *testing.T, ns string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	if err := rdb.Set(context.Background(), tasks.Keys(ns).Serving(""), "test", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// With no worker serving its region, a subscriber's event goes to asynq
// at once only when none of its deliveries waits there: the backlog a
// worker will find joins the lot, whence the first worker's turns hand it
// out in batches, not a task a delivery. Once a worker serves the region,
// the same burst goes at once (up to Config.BatchAfter). Red before: all
// three went to asynq with no worker.
func TestABacklogPublishedWithNoWorkerWaitsInTheLot(t *testing.T) {
	b, ctx := setup(t), context.Background()
	states := func(p *producer.Producer, sub string) string {
		b.put(t, tasks.Subscriber{ID: sub, URL: "https://a.test", EventTypes: []string{sub}})
		var out []string
		for i := range 3 {
			id := fmt.Sprintf("%s-e%d", sub, i)
			if _, err := p.Publish(ctx, event(id, sub), nil); err != nil {
				t.Fatal(err)
			}
			d, _ := p.GetDelivery(ctx, sub, id)
			out = append(out, d.State)
		}
		return fmt.Sprint(out)
	}
	if got := states(b.p, "idle"); got != "[pending scheduled scheduled]" {
		t.Fatalf("no worker: states %s; want the first handed out, the others parked", got)
	}
	if q := testkit.Totals(t, b.insp, b.ns); q.Pending != 1 {
		t.Fatalf("no worker: %d tasks in asynq; want 1", q.Pending)
	}
	serve(t, b.ns)
	// a Producer of its own: b.p read the region unserved a moment ago
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: b.ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if got := states(p, "served"); got != "[pending pending pending]" {
		t.Fatalf("a worker serving: states %s; want all three handed out", got)
	}
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

// A subscriber URL naming, as a literal, an address the worker refuses is
// refused when written, naming the allowlist, and nothing is stored; the
// allowlist (Config.AllowedCIDRs, HOOKLANE_ALLOWED_CIDRS) lets it through.
// No address is dialed.
func TestRefusedAddressIsRefusedWhenWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	closed, err := producer.New(&producer.Config{RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: testkit.Namespace("ssrf")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closed.Close() })
	for _, u := range []string{"http://10.0.0.1/h", "http://169.254.169.254/latest/meta-data", "http://0.0.0.0:80/", "http://[::1]:9/", "http://127.0.0.1:9/"} {
		_, err := closed.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: u})
		if !errors.Is(err, producer.ErrInvalid) || !strings.Contains(err.Error(), "url") || !strings.Contains(err.Error(), "HOOKLANE_ALLOWED_CIDRS") {
			t.Errorf("%s: err = %v, want ErrInvalid naming url and HOOKLANE_ALLOWED_CIDRS", u, err)
		}
		if _, err := closed.GetSubscriber(ctx, "s"); !errors.Is(err, producer.ErrUnknownSubscriber) {
			t.Fatalf("%s: a refused PUT stored something: %v", u, err)
		}
	}
	if _, err := closed.PutSubscriber(ctx, tasks.Subscriber{ID: "named", URL: "https://hooks.example.test/h"}); err != nil {
		t.Errorf("a host name: %v; want it accepted (the worker checks what it resolves to)", err)
	}
	loopback, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: testkit.Namespace("ssrf")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loopback.Close() })
	if _, err := loopback.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "http://127.0.0.1:9/"}); err != nil {
		t.Errorf("127.0.0.1 with loopback allowed: %v", err)
	}
	if _, err := loopback.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "http://10.0.0.1/h"}); !errors.Is(err, producer.ErrInvalid) {
		t.Errorf("10.0.0.1 with loopback allowed: %v, want ErrInvalid", err)
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
		{"horizon of microseconds", tasks.Subscriber{ID: "a", URL: "https://a.test", RetryHorizon: tasks.Duration(3031 * time.Nanosecond)}, "retry_horizon"},
		{"negative horizon", tasks.Subscriber{ID: "a", URL: "https://a.test", RetryHorizon: tasks.Duration(-time.Hour)}, "retry_horizon"},
		{"horizon past its maximum", tasks.Subscriber{ID: "a", URL: "https://a.test", RetryHorizon: tasks.Duration(721 * time.Hour)}, "retry_horizon"},
		{"period of microseconds", tasks.Subscriber{ID: "a", URL: "https://a.test", Limit: limits.Limit{Rate: 1, Burst: 1, Period: 500 * time.Microsecond}}, "limit.period"},
		{"period past its maximum", tasks.Subscriber{ID: "a", URL: "https://a.test", Limit: limits.Limit{Rate: 1, Burst: 1, Period: 25 * time.Hour}}, "limit.period"},
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
	// A grace is 0 (the old secrets stop now) or 1m up to 720h.
	for _, grace := range []time.Duration{-time.Second, 3 * time.Microsecond, 59 * time.Second, 721 * time.Hour} {
		if _, _, err := b.p.RotateSecret(ctx, "s", grace); !errors.Is(err, producer.ErrInvalid) || !strings.Contains(err.Error(), "grace") {
			t.Errorf("RotateSecret with grace %v: err = %v, want ErrInvalid naming grace", grace, err)
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
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: "redis://127.0.0.1:1/0"}})
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
	// hooklane counts the attempts (8 by default): asynqmon's max_retry
	// shows that budget, which asynq's Retried never reaches (it stays 0:
	// TestNewerTaskIsPutBackUnsent); asynq must not keep a delivered task
	// (the delivery record is the dedup marker).
	if info.MaxRetry != 8 || info.Retention != 0 {
		t.Fatalf("task MaxRetry %d Retention %v, want the attempt budget 8 and none", info.MaxRetry, info.Retention)
	}
	// The task is a pointer to the delivery record, of this release's
	// version: no secret, no data, nothing that could go stale.
	if want := fmt.Sprintf(`{"v":%d,"subscriber_id":"videos","event_id":"evt_1"}`, tasks.TaskVersion); string(info.Payload) != want {
		t.Fatalf("payload %s, want %s", info.Payload, want)
	}
	rec, err := b.p.GetDelivery(ctx, "videos", "evt_1")
	if err != nil || rec.ExpiresAt.Sub(rec.DueAt) != 24*time.Hour || rec.EventType != "video.trending" {
		t.Fatalf("record %+v, %v; want its horizon 24h after its due time", rec, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	h, err := rdb.HGetAll(ctx, tasks.Keys(b.ns).Event("evt_1")).Result()
	se, ok := tasks.ParseStoredEvent(h)
	if err != nil || !ok || strings.Count(string(se.Body), "vv_9f31c2") != 1 || fmt.Sprint(se.Subscribers) != "[all paused videos]" ||
		se.Event.Type != "video.trending" {
		t.Fatalf("stored event %v, %v; want it once with its three subscribers", h, err)
	}
	// Kept for the payload retention, or as long as a task may need it:
	// the retry horizon and its margin.
	if ttl := rdb.PTTL(ctx, tasks.Keys(b.ns).Event("evt_1")).Val(); ttl < 24*time.Hour+producer.EventMargin-time.Minute || ttl > 24*time.Hour+producer.EventMargin {
		t.Fatalf("stored event's ttl %v; want the 24h horizon and %v", ttl, producer.EventMargin)
	}
	short, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: b.ns, PayloadRetention: 72 * time.Hour})
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

// Everything a delivery keeps lives from its due time on: an event due 48h
// out is parked until then, its record and log entry live until its due
// time + horizon + dedup window, its horizon ends a horizon after its due
// time, and its payload outlives that. One due past the maximum is
// refused, naming not_before, and writes nothing.
func TestNotBeforeLivesFromItsDueTime(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	nb := time.Now().Add(48 * time.Hour).Add(300 * time.Millisecond)
	res, err := b.p.Publish(ctx, event("e", "t"), &producer.PublishOpts{NotBefore: nb})
	if err != nil {
		t.Fatal(err)
	}
	if at := res.Targets[0].ProcessAt; at.Before(nb) || at.After(nb.Add(time.Second)) {
		t.Fatalf("process_at %v; want %v rounded up to the second", at, nb)
	}
	keys := tasks.Keys(b.ns)
	k := keys.Gates("s")
	d, err := b.p.GetDelivery(ctx, "s", "e")
	if err != nil || d.State != tasks.StateScheduled || !d.DueAt.Equal(nb.Truncate(time.Millisecond)) ||
		!d.ExpiresAt.Equal(d.DueAt.Add(24*time.Hour)) {
		t.Fatalf("record %+v, %v; want scheduled, due at the not-before time, its horizon 24h after", d, err)
	}
	if at := rdb.ZScore(ctx, k.Lot, "e").Val(); at != float64(nb.UnixMilli()) {
		t.Fatalf("parked until %v; want %v", at, nb.UnixMilli())
	}
	if _, err := testkit.Task(b.insp, b.ns, res.Targets[0].TaskID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("a task in asynq 48h ahead of its time: %v", err)
	}
	due := time.Until(nb)
	// within: the key lives want (± a minute), or up to more longer
	within := func(what, key string, want, more time.Duration) {
		t.Helper()
		ttl := rdb.PTTL(ctx, key).Val()
		if ttl < want-time.Minute || ttl > want+more+time.Minute {
			t.Errorf("%s lives %v; want %v (up to %v more)", what, ttl.Round(time.Second), want.Round(time.Second), more)
		}
	}
	within("the delivery record", keys.Delivery("s", "e"), due+24*time.Hour+24*time.Hour, 0)
	within("the delivery log", keys.DeliveryLog("s"), due+24*time.Hour+24*time.Hour, 10*time.Minute)
	within("the stored event", keys.Event("e"), due+max(24*time.Hour, 24*time.Hour+producer.EventMargin), 0)

	far := time.Now().Add(producer.DefaultMaxNotBefore + time.Hour)
	_, err = b.p.Publish(ctx, event("far", "t"), &producer.PublishOpts{NotBefore: far})
	var fe *tasks.FieldError
	if !errors.As(err, &fe) || fe.Field != "not_before" || !errors.Is(err, producer.ErrInvalid) {
		t.Fatalf("not_before past the maximum: %v; want ErrInvalid naming not_before", err)
	}
	if n := rdb.Exists(ctx, keys.Delivery("s", "far"), keys.Event("far")).Val(); n != 0 || rdb.XLen(ctx, keys.DeliveryLog("s")).Val() != 1 {
		t.Fatalf("the refused publish wrote %d keys", n)
	}
}

// A burst beyond what the subscriber's pace hands out within the lead
// waits in its schedule, not in asynq: 2/s with a burst of 2 hands out
// four (the burst, and a second at 2/s) and parks the rest.
func TestBurstBeyondThePaceIsParked(t *testing.T) {
	b, ctx := setup(t), context.Background()
	serve(t, b.ns)
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test", Limit: limits.Limit{Rate: 2, Burst: 2, Period: time.Second}})
	var states []string
	for i := range 8 {
		if _, err := b.p.Publish(ctx, event(fmt.Sprintf("e%d", i), "t"), nil); err != nil {
			t.Fatal(err)
		}
		d, _ := b.p.GetDelivery(ctx, "s", fmt.Sprintf("e%d", i))
		states = append(states, d.State)
	}
	if got := fmt.Sprint(states); got != "[pending pending pending pending scheduled scheduled scheduled scheduled]" {
		t.Fatalf("states %s; want 4 handed out, 4 parked", got)
	}
	if q := testkit.Totals(t, b.insp, b.ns); q.Pending != 4 {
		t.Fatalf("%d tasks in asynq; want the 4 handed out", q.Pending)
	}
}

// A publish parked in a lot that holds no due delivery tells the ready
// index when it is due; one parked behind due deliveries does not while
// the last turn waits for the rate (wr, here an hour on, with the turn it
// arranged): that turn hands it out too, and the write would only wake a
// turn that may send nothing. A subscriber its slots bind (no wr) is told
// at once: its next turn may hand it out.
func TestAParkedPublishTellsTheReadyIndexOnlyWhenATurnMayTakeIt(t *testing.T) {
	b, ctx := setup(t), context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test", Limit: limits.Limit{Rate: 2, Burst: 2, Period: time.Second}})
	keys := tasks.Keys(b.ns)
	ready := keys.Ready("")
	for i := range 5 { // 4 handed out (the burst and a second's lead), the fifth parked
		if _, err := b.p.Publish(ctx, event(fmt.Sprintf("e%d", i), "t"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rdb.ZScore(ctx, ready, "s").Result(); err != nil {
		t.Fatalf("the first parked: no ready entry (%v)", err)
	}
	later := time.Now().Add(time.Hour).UnixMilli()
	publish := func(id string) float64 {
		t.Helper()
		res, err := b.p.Publish(ctx, event(id, "t"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := b.p.GetDelivery(ctx, "s", id); d.State != tasks.StateScheduled || res.Targets[0].Outcome != producer.Scheduled {
			t.Fatalf("%s: %s, %s; want parked and said so", id, d.State, res.Targets[0].Outcome)
		}
		at, err := rdb.ZScore(ctx, ready, "s").Result()
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	rdb.ZAdd(ctx, ready, redis.Z{Score: float64(later), Member: "s"})
	rdb.HSet(ctx, keys.Gate("s"), "wr", later)
	rdb.HDel(ctx, keys.Gate("s"), "ta") // that turn answered the fifth's ask
	if at := publish("e5"); at != float64(later) {
		t.Fatalf("parked behind a due one while the turn waits for the rate: the ready entry moved to %v; want it left at %v", at, later)
	}
	rdb.HDel(ctx, keys.Gate("s"), "wr")
	if at := publish("e6"); at >= float64(later) {
		t.Fatalf("parked behind a due one, no wait noted: the ready entry left at %v; want it at the booking's due time", at)
	}
}

// A publish's fast path is sized for the workers' wait (Config.MaxWait):
// for workers that do not wait (HOOKLANE_MAX_WAIT=0) it hands to asynq
// only what can go at once, the rate's burst, not what a second's lead
// would allow, which such a worker would only park again.
func TestFastPathIsSizedForTheWorkersWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("p")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: ns,
		MaxWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	serve(t, ns)
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "https://a.test", Limit: limits.Limit{Rate: 2, Burst: 2, Period: time.Second}}); err != nil {
		t.Fatal(err)
	}
	var states []string
	for i := range 8 {
		if _, err := p.Publish(ctx, event(fmt.Sprintf("e%d", i), "t"), nil); err != nil {
			t.Fatal(err)
		}
		d, _ := p.GetDelivery(ctx, "s", fmt.Sprintf("e%d", i))
		states = append(states, d.State)
	}
	if got := fmt.Sprint(states); got != "[pending pending scheduled scheduled scheduled scheduled scheduled scheduled]" {
		t.Fatalf("states %s; want the burst of 2 handed out, 6 parked", got)
	}
}

// An id names one event. Published again with the same type and the same
// data as a JSON value (re-serialized, without a timestamp) it is a
// duplicate; with another type or other data it is refused, naming the
// id, and nothing is written: no subscriber is ever sent another event's
// body under its id.
func TestEventIdIsOneEvent(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "ants", URL: "https://a.test", EventTypes: []string{"ant.*"}})
	b.put(t, tasks.Subscriber{ID: "bees", URL: "https://b.test", EventTypes: []string{"bee.*"}})
	first := tasks.Event{ID: "e1", Type: "ant.created", Data: json.RawMessage(`{"name":"atta","legs":6}`),
		Timestamp: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	if _, err := b.p.Publish(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	again := tasks.Event{ID: "e1", Type: "ant.created", Data: json.RawMessage(` { "legs" : 6.0, "name": "atta" }`)}
	if res, err := b.p.Publish(ctx, again, nil); err != nil || res.Targets[0].Outcome != producer.Duplicate {
		t.Fatalf("the same event re-serialized: %+v, %v; want a duplicate", res, err)
	}
	for _, other := range []tasks.Event{
		{ID: "e1", Type: "bee.other", Data: first.Data},
		{ID: "e1", Type: "ant.created", Data: json.RawMessage(`{"name":"atta","legs":8}`)},
	} {
		res, err := b.p.Publish(ctx, other, nil)
		if !errors.Is(err, producer.ErrEventConflict) || !strings.Contains(err.Error(), "e1") || res != nil {
			t.Fatalf("another event under id e1 (%s %s): %+v, %v; want ErrEventConflict naming it", other.Type, other.Data, res, err)
		}
	}
	if _, err := b.p.GetDelivery(ctx, "bees", "e1"); !errors.Is(err, producer.ErrUnknownDelivery) {
		t.Fatalf("the refused publish booked bees: %v", err)
	}
	se, err := b.p.StoredEvent(ctx, "e1")
	if err != nil || se.Event.Type != "ant.created" || string(se.Event.Data) != string(first.Data) || fmt.Sprint(se.Subscribers) != "[ants]" {
		t.Fatalf("stored event %+v, %v; want the first, published to ants", se, err)
	}
}

// before runs a function once, just before the first script call whose
// keys name key: a step of another call slipped in between two of this
// call's.
type before struct {
	key  string
	once sync.Once
	fn   func()
}

func (h *before) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *before) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") && slices.Contains(cmd.Args(), any(h.key)) {
			h.once.Do(h.fn)
		}
		return next(ctx, cmd)
	}
}
func (h *before) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Delete and re-create of one id cannot interleave into a broken state: a
// subscriber created again between the deletion of the old one's
// configuration and of its gate keys keeps its gate record (every publish
// to it would fail until its next PUT otherwise).
func TestDeleteAndCreateAgainDoNotInterleave(t *testing.T) {
	b, ctx := setup(t), context.Background()
	keys := tasks.Keys(b.ns)
	b.put(t, tasks.Subscriber{ID: "s", URL: "https://a.test"})
	hooked := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer hooked.Close()
	var created tasks.Subscriber
	hooked.AddHook(&before{key: keys.Gate("s"), fn: func() {
		created = b.put(t, tasks.Subscriber{ID: "s", URL: "https://b.test"}) // the re-create slips in
	}})
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: hooked, Namespace: b.ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteSubscriber(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if created.Gen == "" {
		t.Fatal("the re-create did not slip in: the test did not test")
	}
	got, err := b.p.GetSubscriber(ctx, "s")
	gen, _ := hooked.HGet(ctx, keys.Gate("s"), "gen").Result()
	if err != nil || got.URL != "https://b.test" || gen != created.Gen {
		t.Fatalf("after the interleave: %+v, %v, gate generation %q; want the new subscriber with its gate record (%s)", got, err, gen, created.Gen)
	}
	if res, err := b.p.Publish(ctx, event("e1", "t"), nil); err != nil || res.Targets[0].Outcome != producer.Enqueued {
		t.Fatalf("publish to the new subscriber: %+v, %v", res, err)
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
		{"cluster client", producer.Config{AllowedCIDRs: testkit.Loopback, Redis: cluster, WaitReplicas: 1}, "Redis Cluster"},
		{"cluster config", producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{ClusterAddrs: []string{"127.0.0.1:1"}}, WaitReplicas: 1}, "Redis Cluster"},
		{"wait past the read timeout", producer.Config{AllowedCIDRs: testkit.Loopback, Redis: short, WaitReplicas: 1, WaitTimeout: time.Second}, "ReadTimeout"},
		{"sub-millisecond wait", producer.Config{AllowedCIDRs: testkit.Loopback, Redis: short, WaitReplicas: 1, WaitTimeout: time.Microsecond}, "WaitTimeout"},
		{"negative", producer.Config{AllowedCIDRs: testkit.Loopback, Redis: short, WaitReplicas: -1}, "WaitReplicas"},
	} {
		if _, err := producer.New(&c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v, want an error naming %s", c.name, err, c.want)
		}
	}

	ns := testkit.Namespace("wait")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: short, Namespace: ns, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
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

// Migrate counts each region's subscribers from their configurations
// (the release before kept only a set of every region ever named): the
// old set's regions are kept with 0, for the workers to let go, and the
// set is deleted when Migrate runs again.
func TestMigrateCountsRegions(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.put(t, tasks.Subscriber{ID: "a", URL: "https://a.test/h", Region: "eu"})
	b.put(t, tasks.Subscriber{ID: "b", URL: "https://a.test/h", Region: "eu"})
	b.put(t, tasks.Subscriber{ID: "c", URL: "https://a.test/h"})
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	keys := tasks.Keys(b.ns)
	// As the release before left it: a set, no counts.
	if err := rdb.Del(ctx, keys.RegionSubscribers()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(ctx, keys.LegacyRegions(), "eu", "gone").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.Migrate(ctx, true); err != nil {
		t.Fatal(err)
	}
	got, err := b.p.Regions(ctx)
	if want := map[string]int{"default": 1, "eu": 2, "gone": 0}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("regions after Migrate: %v, %v; want %v", got, err, want)
	}
	if n := rdb.Exists(ctx, keys.LegacyRegions()).Val(); n != 0 {
		t.Fatal("Migrate run again left the release before's set of regions")
	}
	// The counts follow moves and deletes.
	b.put(t, tasks.Subscriber{ID: "a", URL: "https://a.test/h"})
	if err := b.p.DeleteSubscriber(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	got, _ = b.p.Regions(ctx)
	if want := map[string]int{"default": 2, "eu": 0, "gone": 0}; !maps.Equal(got, want) {
		t.Fatalf("regions after a move and a delete: %v; want %v", got, want)
	}
}
