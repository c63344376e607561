package worker_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// archivedIDs lists the task ids of subscriber sub's tasks in asynq's
// archive (both lanes), as asynqmon's Archived tab shows them.
func (b *bundle) archivedIDs(t testing.TB, sub string) []string {
	t.Helper()
	var ids []string
	for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
		q := tasks.Keys(b.ns).DeliveryQueue("", sub, lane, 1)
		list, err := b.insp.ListArchivedTasks(q, asynq.PageSize(1000))
		if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			t.Fatal(err)
		}
		for _, ti := range list {
			ids = append(ids, ti.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// agree fails t unless asynq's archive and the ledger list the same dead
// letters of sub, and returns them.
func (b *bundle) agree(t testing.TB, sub string) []string {
	t.Helper()
	var listed []string
	for _, e := range b.dead(t, producer.DeadLetterQuery{Subscriber: sub}) {
		listed = append(listed, e.TaskID)
	}
	slices.Sort(listed)
	if archived := b.archivedIDs(t, sub); !slices.Equal(archived, listed) {
		t.Fatalf("asynq's archive holds %q, the ledger lists %q; want the same", archived, listed)
	}
	return listed
}

// taskState is the state of task id in queue; 0 when asynq has none.
func (b *bundle) taskState(t testing.TB, queue, id string) asynq.TaskState {
	t.Helper()
	info, err := b.insp.GetTaskInfo(queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// accepted counts the requests of event id that the sink answered 2xx.
func accepted(s *testkit.Sink, id string) int {
	n := 0
	for _, a := range s.Got() {
		if a.ID == id && a.Accepted {
			n++
		}
	}
	return n
}

// asynqmon's Run on an archived dead letter is asynq's Inspector.RunTask:
// the task goes back to pending with its payload and id. Its run replays
// the dead letter through the gates, once: dead again, it is archived
// again, once, and listed again; delivered, the archive and the ledger
// list it no more.
func TestRunFromTheArchiveReplaysOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{Breaker: noBreaker})
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	const sub, id = "demo-down", "demo-down:e1"
	b.put(t, tasks.Subscriber{ID: sub, URL: s.URL, MaxAttempts: 1})
	b.publish(t, "e1", "t")
	first := b.ledgerEntry(t, id)
	q := first.Queue
	testkit.Eventually(t, 10*time.Second, "the dead letter archived", func() bool { return b.taskState(t, q, id) == asynq.TaskStateArchived })
	b.agree(t, sub)

	if err := b.insp.RunTask(q, id); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the run from the archive to send it once more and dead-letter it again", func() bool {
		e := b.dead(t, producer.DeadLetterQuery{IDs: []string{id}})
		return s.Count() == 2 && len(e) == 1 && e[0].DeadAt.After(first.DeadAt) && b.taskState(t, q, id) == asynq.TaskStateArchived
	})
	if got := b.agree(t, sub); len(got) != 1 {
		t.Fatalf("dead again: listed %q; want it once", got)
	}
	if info, err := b.insp.GetTaskInfo(q, id); err != nil || !strings.Contains(info.LastErr, "HTTP 500") {
		t.Fatalf("archived again with last error %q (%v); want its new death's", info.LastErr, err)
	}

	healthy.Store(true)
	if err := b.insp.RunTask(q, id); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the run from the archive delivered, and nothing left to run", func() bool {
		rec, err := b.p.GetDelivery(ctx, sub, "e1")
		return err == nil && rec.State == tasks.StateDelivered && b.settled(t)
	})
	if n, ok := s.Count(), accepted(s, "e1"); n != 3 || ok != 1 {
		t.Fatalf("%d requests, %d accepted; want 3 (one per run), the last accepted", n, ok)
	}
	if got := b.agree(t, sub); len(got) != 0 {
		t.Fatalf("delivered, still listed dead: %q", got)
	}
	if e := b.ledgerEntry(t, id); e.ReplayedAt.IsZero() {
		t.Fatalf("entry not marked replayed: %+v", e)
	}
	if n := b.w.Stats().Replayed.Load(); n != 2 {
		t.Fatalf("Stats.Replayed = %d; want 2", n)
	}
}

// A dead letter replayed while its subscriber's breaker is open is held
// behind it: whether by asynqmon's Run (its task let go) or hooklane's
// API (its archived task deleted at once), asynq's archive no longer
// lists what the ledger marks replayed; once the endpoint recovers, each
// arrives once.
func TestReplayIntoAnOpenBreakerLeavesNothingArchived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{Breaker: limits.BreakerPolicy{Failures: 2, ProbeGap: 500 * time.Millisecond, MaxProbeGap: time.Second}})
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	const sub = "demo-down"
	b.put(t, tasks.Subscriber{ID: sub, URL: s.URL, MaxAttempts: 1})
	b.publish(t, "e1", "t")
	b.publish(t, "e2", "t")
	e1, e2 := b.ledgerEntry(t, sub+":e1"), b.ledgerEntry(t, sub+":e2")
	testkit.Eventually(t, 10*time.Second, "both archived, the breaker open", func() bool {
		return b.taskState(t, e1.Queue, e1.TaskID) == asynq.TaskStateArchived &&
			b.taskState(t, e2.Queue, e2.TaskID) == asynq.TaskStateArchived && breakerOf(t, b.rdb, b.ns, sub).State != "closed"
	})

	if err := b.insp.RunTask(e1.Queue, e1.TaskID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "asynqmon's Run held behind the breaker, its task let go", func() bool {
		rec, err := b.p.GetDelivery(ctx, sub, "e1")
		return err == nil && rec.State != tasks.StateDead && b.taskState(t, e1.Queue, e1.TaskID) != asynq.TaskStatePending &&
			b.taskState(t, e1.Queue, e1.TaskID) != asynq.TaskStateActive
	})
	out, _, err := b.p.Replay(ctx, producer.DeadLetterQuery{IDs: []string{e2.TaskID}})
	if err != nil || len(out) != 1 || out[0].Outcome != producer.Held || out[0].HeldReason != "breaker_open" || out[0].Error != "" {
		t.Fatalf("Replay = %+v, %v; want held behind the open breaker", out, err)
	}
	if st := b.taskState(t, e2.Queue, e2.TaskID); st == asynq.TaskStateArchived {
		t.Fatalf("replayed through the API into an open breaker, its task is still %s", st)
	}
	if got := b.agree(t, sub); len(got) != 0 {
		t.Fatalf("replayed, still listed dead: %q", got)
	}

	healthy.Store(true)
	testkit.Eventually(t, 20*time.Second, "both delivered once the breaker closes", func() bool {
		return accepted(s, "e1") == 1 && accepted(s, "e2") == 1 && b.settled(t)
	})
	if a1, a2 := accepted(s, "e1"), accepted(s, "e2"); a1 != 1 || a2 != 1 {
		t.Fatalf("accepted e1 %d, e2 %d times; want once each", a1, a2)
	}
	b.agree(t, sub)
}

// Deleting a dead letter (DELETE /v1/dead-letters/{id}) deletes its
// archived task too: asynqmon does not go on listing what the ledger
// dropped, and a Run pressed there afterwards has nothing to send.
func TestDeleteDeadLetterDeletesItsArchivedTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{Breaker: noBreaker})
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 1})
	b.publish(t, "e1", "video.trending")
	testkit.Eventually(t, 10*time.Second, "e1 dead, archived and in the ledger", func() bool {
		return len(b.dead(t, producer.DeadLetterQuery{Subscriber: "s"})) == 1 && len(b.archivedIDs(t, "s")) == 1
	})
	if err := b.p.DeleteDeadLetter(ctx, "s:e1"); err != nil {
		t.Fatal(err)
	}
	b.agree(t, "s")
	if ids := b.archivedIDs(t, "s"); len(ids) != 0 {
		t.Fatalf("archived after the dead letter was deleted: %q", ids)
	}
}
