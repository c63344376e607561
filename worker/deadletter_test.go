package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

func TestDeadLetterLedgerAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.Header().Set("Retry-After", "soon") // unusable: a counted failure
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 2})
	b.publish(t, "e1", "video.trending")
	var dl []tasks.DeadLetter
	testkit.Eventually(t, 10*time.Second, "ledger entry", func() bool {
		dl = b.dead(t, producer.DeadLetterQuery{Subscriber: "s"})
		return len(dl) == 1
	})
	e := dl[0]
	if e.TaskID != "s:e1" || e.Reason != worker.DeadAttempts || e.Event == nil || e.Event.Type != "video.trending" ||
		len(e.Attempts) != 2 || e.Attempts[0].Status != 503 || e.Attempts[1].RetryAfter != "soon" {
		t.Fatalf("ledger entry %+v", e)
	}
	healthy.Store(true)
	out, next, err := b.p.Replay(ctx, producer.DeadLetterQuery{Subscriber: "s"})
	if err != nil || len(out) != 1 || out[0].Outcome != producer.Enqueued || next != "" {
		t.Fatalf("Replay = %+v, %q, %v", out, next, err)
	}
	testkit.Eventually(t, 10*time.Second, "redelivery", func() bool { return s.Count() == 3 })
	if got := s.Got()[2].Header.Get("webhook-id"); got != "e1" {
		t.Fatalf("replayed webhook-id %q, want the same event id e1", got)
	}
	if dl := b.dead(t, producer.DeadLetterQuery{Subscriber: "s"}); len(dl) != 0 {
		t.Fatalf("replayed entry still listed as dead: %+v", dl)
	}
	dl = b.dead(t, producer.DeadLetterQuery{IDs: []string{"s:e1"}, IncludeReplayed: true})
	if len(dl) != 1 || dl[0].ReplayedAt.IsZero() || len(dl[0].Attempts) != 2 {
		t.Fatalf("replayed entry not marked, or its history lost: %+v", dl)
	}
	if out, next, err := b.p.Replay(ctx, producer.DeadLetterQuery{Subscriber: "s"}); err != nil || len(out) != 0 || next != "" {
		t.Fatalf("second replay did %+v, %q, %v; want nothing, and no error", out, next, err)
	}
	if err := b.p.DeleteDeadLetter(ctx, "s:e1"); err != nil {
		t.Fatal(err)
	}
	if err := b.p.DeleteDeadLetter(ctx, "s:e1"); !errors.Is(err, producer.ErrUnknownDeadLetter) {
		t.Fatalf("second delete: %v", err)
	}
}

// asynq trims its archive to 10,000 tasks per queue; the ledger must keep
// every dead letter of an outage larger than that, and replay them all.
func TestLedgerOutlivesArchiveTrim(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("12,000 deliveries")
	}
	const n = 12_000
	ctx := context.Background()
	b := setup(t, worker.Config{})
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 1, MaxInFlight: 200, Limit: limits.PerSecond(1_000_000)})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				b.publish(t, fmt.Sprintf("e%05d", i), "t")
			}
		})
	}
	wg.Wait()
	testkit.Eventually(t, 2*time.Minute, "all dead", func() bool { return b.w.Stats().Dead.Load() == n })
	q, err := b.insp.GetQueueInfo(b.ns)
	if err != nil || q.Archived > 10_000 {
		t.Fatalf("asynq archive holds %d (%v); the test expects asynq's trim to at most 10,000", q.Archived, err)
	}
	t.Logf("asynq archive kept %d of %d dead letters", q.Archived, n)
	dl, next, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{Limit: 100_000})
	if err != nil || len(dl) != 10_000 || next == "" { // one page at most, and a cursor to the rest
		t.Fatalf("DeadLetters page: %d, next %q, %v", len(dl), next, err)
	}
	rest, next, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{Limit: 10_000, Cursor: next})
	if err != nil || len(rest) != n-10_000 || next != "" {
		t.Fatalf("DeadLetters second page: %d, next %q, %v; want the other %d", len(rest), next, err, n-10_000)
	}
	healthy.Store(true)
	out, err := b.p.ReplayAll(ctx, producer.DeadLetterQuery{Subscriber: "s"})
	if err != nil || len(out) != n {
		t.Fatalf("Replay: %d outcomes, %v; want %d", len(out), err, n)
	}
	for _, o := range out {
		if o.Outcome != producer.Enqueued {
			t.Fatalf("replay of %s: %s %s", o.TaskID, o.Outcome, o.Error)
		}
	}
	testkit.Eventually(t, 2*time.Minute, "all redelivered", func() bool { return b.w.Stats().Delivered.Load() == n })
}
