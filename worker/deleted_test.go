package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Deleting a subscriber with a backlog drops its queued events: counted,
// never sent, no ledger entry each. A subscriber created again under the
// same id is a new generation: the old events are not sent to its new URL
// with its new secrets.
func TestDeletedSubscriberBacklogIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	old := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: old.URL})
	if err := b.p.SetPaused(ctx, "s", true); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		ev := tasks.Event{ID: fmt.Sprintf("e%02d", i), Type: "t", Data: json.RawMessage(`1`)}
		if _, err := b.p.SendTo(ctx, "s", ev, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := testkit.Parked(ctx, b.rdb, b.ns); err != nil || n != 50 {
		t.Fatalf("%d parked, %v; want the backlog held while paused", n, err)
	}
	if err := b.p.DeleteSubscriber(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	fresh := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: fresh.URL})
	testkit.Eventually(t, 20*time.Second, "the old backlog dropped", func() bool {
		c, err := worker.ReadCounters(ctx, b.rdb, b.ns)
		return err == nil && c[worker.DroppedDeleted] == n && b.settled(t)
	})
	if got, gotOld := fresh.Count(), old.Count(); got != 0 || gotOld != 0 {
		t.Fatalf("the re-created subscriber received %d of the old events, the deleted one %d; want none", got, gotOld)
	}
	if dl := b.dead(t, producer.DeadLetterQuery{IncludeReplayed: true}); len(dl) != 0 {
		t.Fatalf("%d ledger entries for dropped events, want none", len(dl))
	}
	q, err := testkit.QueueInfo(b.insp, b.ns)
	if err != nil || q.Archived != 0 || q.Completed != 0 {
		t.Fatalf("queue %+v, %v: dropped tasks are removed, not archived or kept", q, err)
	}
	// The new generation gets its own events.
	b.publish(t, "after", "t")
	testkit.Eventually(t, 10*time.Second, "the new subscriber's own event", func() bool { return fresh.Count() == 1 })
}

// An event published again for a subscriber deleted and created again
// while the old generation's task of that event is running (its request
// still open) is the new generation's delivery: reported enqueued, not a
// duplicate, and delivered to the new subscriber as soon as the old run
// ends, not when some lease lapses; the old run's outcome is not written
// over it.
func TestRepublishRacingTheOldGenerationsRunIsDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	release := make(chan struct{})
	old := testkit.NewSink(t, func(http.ResponseWriter, int) { <-release })
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: old.URL})
	b.publish(t, "e1", "t")
	testkit.Eventually(t, 10*time.Second, "the old generation's request open", func() bool { return old.Count() == 1 })
	if err := b.p.DeleteSubscriber(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	fresh := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: fresh.URL})
	res := b.publish(t, "e1", "t")
	if o := res.Targets[0].Outcome; o != producer.Enqueued {
		t.Fatalf("published again for the new generation: %s; want enqueued", o)
	}
	close(release)
	testkit.Eventually(t, 10*time.Second, "the new generation's delivery", func() bool { return fresh.Count() == 1 })
	testkit.Eventually(t, 5*time.Second, "its record delivered", func() bool {
		d, err := b.p.GetDelivery(ctx, "s", "e1")
		return err == nil && d.State == tasks.StateDelivered && d.AttemptCount == 1
	})
}
