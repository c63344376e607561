package worker_test

// Kill -9 scenarios around the dead-letter ledger (run by TestKill9, which
// pays asynq's lease recovery once for all of them).

import (
	"context"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// crashOnLastAttempt kills the worker while its request for the event's
// last attempt is held open. asynq counts the lost lease as an attempt, so
// the budget is spent: the event must become a dead letter with a ledger
// entry, not be archived by asynq on its own (nor sent a third time).
func crashOnLastAttempt(t *testing.T) func(*testing.T) {
	var requests atomic.Int64
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, r *http.Request, _ string) bool {
		switch requests.Add(1) {
		case 1:
			w.WriteHeader(http.StatusInternalServerError) // attempt 1 of 2
		case 2:
			<-r.Context().Done() // attempt 2: held until the worker is killed
		default:
			// Whatever comes later is refused with a 429: a task asynq
			// archived on its own after a deferral would escape the ledger.
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
		return false
	})
	b := newCrashBundle(t, testkit.Namespace("kill-last-"), tasks.Subscriber{ID: "s", URL: rc.URL, Limit: fast, MaxAttempts: 2})
	w := startProc(t, redisURL(), b.ns)
	b.publishN(t, "e", 1)
	testkit.Eventually(t, 10*time.Second, "the last attempt's request held", func() bool { return requests.Load() == 2 })
	w.kill()
	startProc(t, redisURL(), b.ns)
	return func(t *testing.T) {
		var dl []tasks.DeadLetter
		ok := testkit.PollEvery(150*time.Second, 200*time.Millisecond, func() bool {
			var err error
			dl, _, err = b.p.DeadLetters(context.Background(), producer.DeadLetterQuery{Subscriber: "s"})
			return err == nil && len(dl) == 1
		})
		info, err := testkit.Task(b.insp, b.ns, tasks.TaskID("s", "e000"))
		if err != nil {
			t.Fatalf("the task: %v", err)
		}
		if !ok || info.State != asynq.TaskStateArchived {
			t.Fatalf("after the lost last attempt: ledger %+v, task %s (%s); want a dead letter in the ledger and the task archived",
				dl, info.State, info.LastErr)
		}
		if dl[0].Reason != "attempts" || len(dl[0].Attempts) != 1 {
			t.Errorf("ledger entry %+v; want reason attempts, with the one answered attempt", dl[0])
		}
		if n := requests.Load(); n != 2 {
			t.Errorf("%d requests; want 2: no attempt was left after the lost one", n)
		}
	}
}

// crashBeforeArchive kills the worker after it wrote a dead letter (the
// endpoint answered 410) and before asynq archived the task. The task is
// then retried by lease recovery and delivered: the ledger entry was
// stale. A replay meanwhile must not send it again, the delivery must
// clear the entry, and a replay after it must do nothing.
func crashBeforeArchive(t *testing.T) func(*testing.T) {
	var gone atomic.Bool
	gone.Store(true)
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ string) bool {
		if gone.Load() {
			w.WriteHeader(http.StatusGone)
			return false
		}
		return true
	})
	ns := testkit.Namespace("kill-archive-")
	b := newCrashBundle(t, ns, tasks.Subscriber{ID: "s", URL: rc.URL, Limit: fast})
	proxy := newFaultProxy(t, redisSrv.Addr)
	w := startProc(t, proxy.URL(), ns)
	q := "asynq:{" + tasks.Keys(ns).DeliveryQueue("", "s", tasks.LaneFresh, 1) + "}:"
	id := tasks.TaskID("s", "e000")
	proxy.arm(respKeys(q+"t:"+id, q+"active", q+"lease", q+"archived"), func() { _ = w.cmd.Process.Signal(syscall.SIGKILL) })
	b.publishN(t, "e", 1)
	testkit.Eventually(t, 10*time.Second, "the worker killed before the archive write", proxy.hasTripped)
	if !w.wait(5 * time.Second) {
		t.Fatal("worker still running after SIGKILL")
	}
	ctx := context.Background()
	if dl, _, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{IDs: []string{id}}); err != nil || len(dl) != 1 {
		t.Fatalf("ledger at the kill: %+v, %v; want the entry written before the archive", dl, err)
	}
	// The endpoint is back and the operator resumes the subscriber the 410
	// paused; the task itself is active, its lease not yet recovered.
	gone.Store(false)
	if err := b.p.SetPaused(ctx, "s", false); err != nil {
		t.Fatal(err)
	}
	// A refusal is reported in the outcome (and the error lists it).
	early, _, _ := b.p.Replay(ctx, producer.DeadLetterQuery{IDs: []string{id}})
	startProc(t, redisURL(), ns)
	return func(t *testing.T) {
		if len(early) != 1 || early[0].Outcome == producer.Enqueued {
			t.Errorf("replay while the task was not dead: %+v; want it not re-sent", early)
		}
		testkit.Eventually(t, 150*time.Second, "the recovered task delivered", func() bool {
			sub, ev, _ := tasks.SplitTaskID(id)
			st, _, err := testkit.Ended(b.insp, b.rdb, ns, sub, ev)
			return err == nil && st == asynq.TaskStateCompleted
		})
		testkit.Eventually(t, 10*time.Second, "the stale ledger entry cleared by the delivery", func() bool {
			dl, _, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{IDs: []string{id}, IncludeReplayed: true})
			return err == nil && len(dl) == 0
		})
		out, _, err := b.p.Replay(ctx, producer.DeadLetterQuery{Subscriber: "s"})
		if err != nil || len(out) != 0 {
			t.Errorf("replay after the delivery: %+v, %v; want nothing to replay", out, err)
		}
		accepted := 0
		for _, h := range rc.Got() {
			if h.Accepted {
				accepted++
			}
		}
		if accepted != 1 {
			t.Errorf("the event was accepted %d times; want once", accepted)
		}
	}
}
