package producer_test

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// The indexes /metrics reads instead of every subscriber follow the
// subscribers: the marked ones (Subscriber.Metrics) and the paused ones.
func TestMetricsAndPausedIndexes(t *testing.T) {
	b, ctx := setup(t), context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	keys := tasks.Keys(b.ns)
	marked := func() []string {
		ids, err := rdb.ZRange(ctx, keys.MetricsIndex(), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	paused := func() []string {
		ids, err := rdb.SMembers(ctx, keys.PausedIndex()).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return ids
	}
	const url = "https://acme.example/hooks"
	if s := b.put(t, tasks.Subscriber{ID: "a", URL: url, Metrics: true}); !s.Metrics {
		t.Fatal("Metrics not stored")
	}
	b.put(t, tasks.Subscriber{ID: "b", URL: url})
	b.put(t, tasks.Subscriber{ID: "c", URL: url, Metrics: true, Paused: true})
	if got := marked(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("marked %v, want [a c]", got)
	}
	if got := paused(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("paused %v, want [c] (created paused)", got)
	}
	// A PUT replaces the mark like the rest of the configuration.
	b.put(t, tasks.Subscriber{ID: "a", URL: url})
	b.put(t, tasks.Subscriber{ID: "b", URL: url, Metrics: true})
	if got := marked(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("marked %v after re-marking, want [b c]", got)
	}
	if err := b.p.SetPaused(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	if err := b.p.SetPaused(ctx, "c", false); err != nil {
		t.Fatal(err)
	}
	if got := paused(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("paused %v after pausing a and resuming c, want [a]", got)
	}
	for _, id := range []string{"a", "b"} {
		if err := b.p.DeleteSubscriber(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got, p := marked(), paused(); !slices.Equal(got, []string{"c"}) || len(p) != 0 {
		t.Fatalf("after deleting a and b: marked %v, paused %v; want [c] and none", got, p)
	}
}
