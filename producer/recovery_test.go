package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
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

// failOnce fails the first script call whose keys name key, before it
// reaches Redis: a step lost to a fault.
type failOnce struct {
	key    string
	failed atomic.Bool
}

func (h *failOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") && slices.Contains(cmd.Args(), any(h.key)) && h.failed.CompareAndSwap(false, true) {
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
			if strings.HasPrefix(cmd.Name(), "eval") && slices.Contains(cmd.Args(), any(h.key)) && h.failed.CompareAndSwap(false, true) {
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
// naming key fails.
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
