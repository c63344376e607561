package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
