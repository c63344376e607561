package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A delivery of a subscriber deleted and created again is never sent with
// the new generation's configuration, even when its run is admitted in the
// moment the gate record is still the old generation's (the new
// configuration written, its gate record not yet): the run reads the
// configuration of another generation, puts the delivery back unsent, and
// once the gate record is the new one's the delivery is dropped.
func TestOldGenerationsDeliveryIsNotSentWithTheNewConfiguration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	keys := tasks.Keys(b.ns)
	oldSink, newSink := testkit.NewSink(t, nil), testkit.NewSink(t, nil)
	old := b.put(t, tasks.Subscriber{ID: "s", URL: oldSink.URL})
	oldCV := b.rdb.HGet(ctx, keys.Gate("s"), "cv").Val()
	// The DELETE's directory step, then a PUT creating it again whose gate
	// record is not written yet: put back as the old generation's. The
	// event is published once the race is set up, booked for the old
	// generation the gate record names; published before it, a worker's
	// look at the subscriber (a turn of its paused lane) could keep the
	// old configuration for the cache's second, and the run would send
	// with it, as the old generation's delivery it is.
	if err := b.rdb.HDel(ctx, keys.SubscriberConfigs(), "s").Err(); err != nil {
		t.Fatal(err)
	}
	fresh := b.put(t, tasks.Subscriber{ID: "s", URL: newSink.URL})
	newCV := b.rdb.HGet(ctx, keys.Gate("s"), "cv").Val()
	if err := b.rdb.HSet(ctx, keys.Gate("s"), "gen", old.Gen, "cv", oldCV).Err(); err != nil {
		t.Fatal(err)
	}
	b.publish(t, "e1", "t")
	if g := b.rdb.HGet(ctx, keys.Delivery("s", "e1"), "g").Val(); g != old.Gen {
		t.Fatalf("the delivery was booked for generation %q, want the old one's %q", g, old.Gen)
	}
	testkit.Eventually(t, 20*time.Second, "the old generation's delivery run and put back", func() bool {
		if newSink.Count() > 0 {
			t.Fatalf("the new endpoint received the old generation's delivery (generation %s, the new one %s)", old.Gen, fresh.Gen)
		}
		d, err := b.p.GetDelivery(ctx, "s", "e1")
		if err != nil {
			return false
		}
		for _, a := range d.Attempts {
			if strings.Contains(a.Error, "generation") {
				return true
			}
		}
		return false
	})
	// The PUT's gate record written: the old delivery is dropped.
	if err := b.rdb.HSet(ctx, keys.Gate("s"), "gen", fresh.Gen, "cv", newCV).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the old generation's delivery dropped", func() bool {
		c, err := worker.ReadCounters(ctx, b.rdb, b.ns)
		return err == nil && c[worker.DroppedDeleted] == 1 && b.settled(t)
	})
	if n, m := newSink.Count(), oldSink.Count(); n != 0 || m != 0 {
		t.Fatalf("the new endpoint received %d requests, the old %d; want none", n, m)
	}
}
