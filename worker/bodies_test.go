package worker_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// An event fanned out to several subscribers is read from Redis once a
// worker process: here the second subscriber's delivery, let go after the
// first's, is sent the body the first read although the stored body is
// gone from Redis by then (a delivery that had to read it would be dead:
// its payload gone).
func TestAnEventFannedOutIsReadOnceAProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	for _, id := range []string{"first", "second"} {
		b.put(t, tasks.Subscriber{ID: id, URL: s.URL + "/" + id, EventTypes: []string{"t"}})
	}
	if err := b.p.SetPaused(ctx, "second", true); err != nil {
		t.Fatal(err)
	}
	b.publish(t, "e1", "t")
	testkit.Eventually(t, 10*time.Second, "the first subscriber's delivery", func() bool { return s.Count() == 1 })
	if err := b.rdb.HDel(ctx, tasks.Keys(b.ns).TenantEvent(tasks.TenantOf("second"), "e1"), tasks.EventFieldBody).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.p.SetPaused(ctx, "second", false); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the second subscriber's delivery", func() bool { return s.Count() == 2 })
	got := s.Got()
	if !bytes.Equal(got[0].Body, got[1].Body) || !bytes.Contains(got[1].Body, []byte(`"id":"e1"`)) {
		t.Fatalf("bodies %q and %q; want the event's, twice", got[0].Body, got[1].Body)
	}
	// (its request is answered before its outcome is committed)
	testkit.Eventually(t, 10*time.Second, "the second delivery committed delivered", func() bool {
		d, err := b.p.GetDelivery(ctx, "second", "e1")
		return err == nil && d.State == tasks.StateDelivered
	})
}
