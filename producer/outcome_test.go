package producer_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// A publish says what it did with each target: enqueued (handed to the
// workers now, no process_at: it is due now), scheduled (with its due
// time), or held with why: paused, breaker open, cooling (until the
// cooldown's end). The due time is compared in Redis' clock, so a target
// enqueued at once has no process_at a second after its delivery.
func TestPublishSaysWhatItDidWithEachTarget(t *testing.T) {
	b, ctx := setup(t), context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	for _, id := range []string{"fast", "open", "cool", "paused"} {
		b.put(t, tasks.Subscriber{ID: id, URL: "https://" + id + ".test", Paused: id == "paused"})
	}
	keys := tasks.Keys(b.ns)
	// The breaker as the worker's Commit opens it (limits/commit.go).
	now := time.Now().UnixMilli()
	if err := rdb.HSet(ctx, keys.Gates("open").Record, "b_open", now, "b_gap", 60000, "b_next", strconv.FormatInt(now+60000, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	coolUntil, _, err := limits.NewGates(rdb).Cooldown(ctx, keys.Gates("cool"), limits.RetryAfter{After: 30 * time.Second}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	res, err := b.p.Publish(ctx, event("e1", "t"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]producer.Target{}
	for _, tg := range res.Targets {
		got[tg.SubscriberID] = tg
	}
	for _, c := range []struct {
		sub     string
		outcome producer.Outcome
		reason  string
		at      time.Time
	}{
		{"fast", producer.Enqueued, "", time.Time{}},
		{"open", producer.Held, producer.HeldBreakerOpen, time.Time{}},
		{"cool", producer.Held, producer.HeldCooling, limits.CeilSecond(coolUntil)},
		{"paused", producer.Held, producer.HeldPaused, time.Time{}},
	} {
		tg := got[c.sub]
		if tg.Outcome != c.outcome || tg.HeldReason != c.reason || !tg.ProcessAt.Equal(c.at) {
			t.Errorf("%s: outcome %s, held_reason %q, process_at %v; want %s, %q, %v", c.sub, tg.Outcome, tg.HeldReason, tg.ProcessAt,
				c.outcome, c.reason, c.at)
		}
	}

	nb := time.Now().Add(time.Minute)
	res, err = b.p.Publish(ctx, event("e2", "t"), &producer.PublishOpts{NotBefore: nb})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range res.Targets {
		if tg.SubscriberID == "fast" && (tg.Outcome != producer.Scheduled || !tg.ProcessAt.Equal(limits.CeilSecond(nb))) {
			t.Errorf("fast, not before %v: outcome %s, process_at %v; want scheduled at %v", nb, tg.Outcome, tg.ProcessAt, limits.CeilSecond(nb))
		}
	}
}
