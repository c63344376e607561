package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A worker keeps its region's Serving mark while it runs: it writes it
// again before it lapses (a publish that finds none parks a subscriber's
// events after the first, producer/serving.go), and the mark lapses by
// itself, a few seconds after the last worker stopped.
func TestAWorkerKeepsItsRegionsServingMark(t *testing.T) {
	b := setup(t, worker.Config{})
	ctx := context.Background()
	key := tasks.Keys(b.ns).Serving("")
	ttl := func() time.Duration { return b.rdb.PTTL(ctx, key).Val() }
	if d := ttl(); d <= 0 || d > 5*time.Second {
		t.Fatalf("the mark's time to live %v; want a lapse within 5s", d)
	}
	// Written again: its time to live goes up (it only falls between writes).
	last := ttl()
	testkit.Eventually(t, 10*time.Second, "the mark written again", func() bool {
		d := ttl()
		up := d > last
		last = d
		return up
	})
}
