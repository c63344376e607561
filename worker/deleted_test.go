package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Deleting a subscriber with a backlog drops its queued events when they
// come due: counted, never sent, no ledger entry each. A subscriber created
// again under the same id is a new generation: the old events are not sent
// to its new URL with its new secrets.
func TestDeletedSubscriberBacklogIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{PauseRecheck: 200 * time.Millisecond})
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
	testkit.Eventually(t, 10*time.Second, "the backlog held while paused", func() bool {
		q, err := testkit.QueueInfo(b.insp, b.ns)
		return err == nil && q.Retry == n
	})
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
