package worker_test

// Kill -9 and SIGTERM scenarios around the last attempt and the dead
// letter (kill9 runs the kills).

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
// last attempt is held open. A request lost with its worker counts (it may
// have reached the endpoint): the budget is spent, so the recovered run
// dead-letters the event, with a ledger entry, without a third request.
func crashOnLastAttempt(t *testing.T) {
	var requests atomic.Int64
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, r *http.Request, _ string) bool {
		switch requests.Add(1) {
		case 1:
			w.WriteHeader(http.StatusInternalServerError) // attempt 1 of 2
		case 2:
			<-r.Context().Done() // attempt 2: held until the worker is killed
		default:
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
	expireLeases(t, b.rdb, b.ns, "s")
	startProc(t, redisURL(), b.ns)
	// The ledger entry is committed before the handler answers asynq, and
	// asynq archives the task after: wait for both.
	var dl []tasks.DeadLetter
	var info *asynq.TaskInfo
	var taskErr error
	ok := testkit.PollEvery(30*time.Second, 100*time.Millisecond, func() bool {
		var err error
		dl, _, err = b.p.DeadLetters(context.Background(), producer.DeadLetterQuery{Subscriber: "s"})
		info, taskErr = testkit.Task(b.insp, b.ns, tasks.TaskID("s", "e000"))
		return err == nil && len(dl) == 1 && taskErr == nil && info.State == asynq.TaskStateArchived
	})
	if taskErr != nil {
		t.Fatalf("the task: %v (ledger %+v)", taskErr, dl)
	}
	if !ok || info.State != asynq.TaskStateArchived {
		t.Fatalf("after the lost last attempt: ledger %+v, task %s (%s); want a dead letter in the ledger and the task archived",
			dl, info.State, info.LastErr)
	}
	// The answered attempt and the lost one, both in the entry.
	if dl[0].Reason != "attempts" || len(dl[0].Attempts) != 2 || dl[0].Attempts[0].Status != 500 {
		t.Errorf("ledger entry %+v; want reason attempts, with the answered attempt and the lost one", dl[0])
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests; want 2: no attempt was left after the lost one", n)
	}
}

// crashBeforeArchive kills the worker after it committed a dead letter (the
// endpoint answered 410) and before asynq archived the task. The task comes
// back by lease recovery: its run finds the delivery dead and archives
// it, sending nothing; a replay then sends it once.
func crashBeforeArchive(t *testing.T) {
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
		t.Fatalf("ledger at the kill: %+v, %v; want the entry, committed with the dead state", dl, err)
	}
	gone.Store(false)
	if err := b.p.SetPaused(ctx, "s", false); err != nil { // the 410 paused it
		t.Fatal(err)
	}
	expireLeases(t, b.rdb, ns, "s")
	startProc(t, redisURL(), ns)
	testkit.Eventually(t, 30*time.Second, "the recovered task archived", func() bool {
		info, err := testkit.Task(b.insp, ns, id)
		return err == nil && info.State == asynq.TaskStateArchived
	})
	if n := rc.Count(); n != 1 {
		t.Fatalf("%d requests; want the one 410: a dead delivery's recovered task sends nothing", n)
	}
	out, _, err := b.p.Replay(ctx, producer.DeadLetterQuery{Subscriber: "s"})
	if err != nil || len(out) != 1 || out[0].Outcome != producer.Enqueued {
		t.Fatalf("replay: %+v, %v; want it enqueued", out, err)
	}
	testkit.Eventually(t, 10*time.Second, "the replay delivered", func() bool { return rc.Count() == 2 })
}

// A request cut by the shutdown is not an attempt (issue: a shutdown on the
// last attempt made a live task a dead letter, and its replay a double
// delivery). max_attempts 1, the request held past SIGTERM's 2s shutdown
// timeout: asynq puts the task back; the next worker delivers it; no dead
// letter is listed, the record says the first request was interrupted,
// and a replay sends nothing.
func shutdownOnTheLastAttemptIsNotAnAttempt(t *testing.T) {
	var requests atomic.Int64
	rc := testkit.NewReceiver(t, func(_ http.ResponseWriter, r *http.Request, _ string) bool {
		if requests.Add(1) == 1 {
			<-r.Context().Done() // acted on, never answered: the shutdown cuts it
			return true
		}
		return true
	})
	b := newCrashBundle(t, testkit.Namespace("term-last-"), tasks.Subscriber{ID: "s", URL: rc.URL, Limit: fast, MaxAttempts: 1})
	w := startProc(t, redisURL(), b.ns)
	b.publishN(t, "e", 1)
	testkit.Eventually(t, 10*time.Second, "the request held", func() bool { return requests.Load() == 1 })
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !w.wait(10 * time.Second) {
		t.Fatal("worker still running after its shutdown timeout")
	}
	ctx := context.Background()
	d, err := b.p.GetDelivery(ctx, "s", "e000")
	if err != nil || d.State != tasks.StatePending || d.AttemptsSpent != 0 || len(d.Attempts) != 1 {
		t.Fatalf("record after the shutdown: %+v, %v; want pending, no attempt spent, the interrupted request recorded", d, err)
	}
	startProc(t, redisURL(), b.ns)
	testkit.Eventually(t, 20*time.Second, "delivered by the next worker", func() bool {
		d, err := b.p.GetDelivery(ctx, "s", "e000")
		return err == nil && d.State == tasks.StateDelivered
	})
	if dl, _, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{IncludeReplayed: true}); err != nil || len(dl) != 0 {
		t.Fatalf("dead letters %+v, %v; want none", dl, err)
	}
	if out, _, err := b.p.Replay(ctx, producer.DeadLetterQuery{Subscriber: "s"}); err != nil || len(out) != 0 {
		t.Fatalf("replay: %+v, %v; want nothing to replay", out, err)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests; want 2: the one cut, the one that delivered", n)
	}
}
