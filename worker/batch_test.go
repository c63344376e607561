package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// publishHeld publishes events ids to paused subscriber sub, then resumes
// it: its next turn hands them out together, as a batch.
func publishHeld(t testing.TB, p *producer.Producer, sub string, ids []string) {
	t.Helper()
	ctx := context.Background()
	if err := p.SetPaused(ctx, sub, true); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := p.Publish(ctx, tasks.Event{ID: id, Type: "t", Data: []byte(`1`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetPaused(ctx, sub, false); err != nil {
		t.Fatal(err)
	}
}

// batchTasks lists the batch tasks (their ids) of namespace ns's
// subscriber sub that asynq holds now, in any state but completed.
func batchTasks(t testing.TB, insp *asynq.Inspector, ns, sub string) []string {
	t.Helper()
	var ids []string
	for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
		q := tasks.Keys(ns).DeliveryQueue("", sub, lane, 1)
		for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
			insp.ListPendingTasks, insp.ListActiveTasks, insp.ListRetryTasks, insp.ListArchivedTasks,
		} {
			tis, err := list(q, asynq.PageSize(1000))
			if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
				t.Fatal(err)
			}
			for _, ti := range tis {
				if strings.Contains(ti.ID, "+") {
					ids = append(ids, ti.ID)
				}
			}
		}
	}
	return ids
}

// The due deliveries a turn hands out together travel as one task; one of
// them that dies is archived as a task of its own, under its own id, and
// asynq's archive (what asynqmon lists) and the ledger agree on it alone;
// the Run of that archived task sends that delivery once more, and only
// it.
func TestBatchDeadDeliveryIsArchivedAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{Breaker: noBreaker})
	var healthy atomic.Bool
	s := testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, id string) bool {
		if id == "e3" && !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		return true
	})
	const sub = "batch-dead"
	b.put(t, tasks.Subscriber{ID: sub, URL: s.URL, MaxAttempts: 1, Limit: fast, MaxInFlight: 8})
	ids := []string{"e1", "e2", "e3", "e4", "e5"}
	publishHeld(t, b.p, sub, ids)
	id := tasks.TaskID(sub, "e3")
	e := b.ledgerEntry(t, id)
	testkit.Eventually(t, 10*time.Second, "the batch settled, its dead delivery archived", func() bool {
		return b.taskState(t, e.Queue, id) == asynq.TaskStateArchived && b.settled(t)
	})
	if n, m := b.w.Stats().Batches.Load(), b.w.Stats().Batched.Load(); n != 1 || m != int64(len(ids)) {
		t.Fatalf("%d batch tasks of %d deliveries; want the 5 handed out together as 1", n, m)
	}
	if got := b.agree(t, sub); !slices.Equal(got, []string{id}) {
		t.Fatalf("archived and listed %q; want %s alone", got, id)
	}
	if info, err := b.insp.GetTaskInfo(e.Queue, id); err != nil || !strings.Contains(info.LastErr, "HTTP 500") {
		t.Fatalf("archived with last error %q (%v); want its death's", info.LastErr, err)
	}
	for _, ev := range ids {
		want := tasks.StateDelivered
		if ev == "e3" {
			want = tasks.StateDead
		}
		if rec, err := b.p.GetDelivery(ctx, sub, ev); err != nil || rec.State != want || accepted(s, ev) > 1 {
			t.Fatalf("%s: %s (%v), accepted %d times; want %s, at most once", ev, rec.State, err, accepted(s, ev), want)
		}
	}

	healthy.Store(true)
	before := s.Count()
	if err := b.insp.RunTask(e.Queue, id); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the Run from the archive delivered e3", func() bool {
		rec, err := b.p.GetDelivery(ctx, sub, "e3")
		return err == nil && rec.State == tasks.StateDelivered && b.settled(t)
	})
	var sent []string
	for _, a := range s.Got()[before:] {
		sent = append(sent, a.ID)
	}
	if !slices.Equal(sent, []string{"e3"}) {
		t.Fatalf("the Run sent %q; want e3 once", sent)
	}
	if got := b.agree(t, sub); len(got) != 0 {
		t.Fatalf("delivered, still listed dead: %q", got)
	}
}

// A 429 answered to one of a batch's requests stops the batch's unsent
// deliveries: none is sent before the Retry-After deadline, none spends an
// attempt for it, and every one is delivered after it.
func TestBatch429StopsItsUnsentDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	const retryAfter = 2 * time.Second
	var (
		mu       sync.Mutex
		deadline time.Time
		early    []string
	)
	s := testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, id string) bool {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if !deadline.IsZero() && now.Before(deadline) {
			early = append(early, fmt.Sprintf("%s %v early", id, deadline.Sub(now)))
		}
		if id == "e2" && deadline.IsZero() {
			deadline = now.Add(retryAfter)
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return false
		}
		return true
	})
	const sub = "batch-429"
	// 5 a second, one at a time: the batch's requests are 200 ms apart,
	// the 429 comes while the rest wait for their rate slots.
	b.put(t, tasks.Subscriber{ID: sub, URL: s.URL, Limit: limits.Limit{Rate: 5, Burst: 1, Period: time.Second}, MaxInFlight: 8})
	ids := []string{"e1", "e2", "e3", "e4", "e5"}
	publishHeld(t, b.p, sub, ids)
	testkit.Eventually(t, 20*time.Second, "every event delivered", func() bool {
		for _, ev := range ids {
			if rec, err := b.p.GetDelivery(ctx, sub, ev); err != nil || rec.State != tasks.StateDelivered {
				return false
			}
		}
		return b.settled(t)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("requests before the 429's deadline: %v", early)
	}
	if deadline.IsZero() {
		t.Fatal("e2 was never answered 429")
	}
	if n := b.w.Stats().Batches.Load(); n == 0 {
		t.Fatal("no batch task ran; want the held events handed out together")
	}
	for _, ev := range ids {
		rec, err := b.p.GetDelivery(ctx, sub, ev)
		if err != nil {
			t.Fatal(err)
		}
		if rec.AttemptsSpent != 1 || accepted(s, ev) != 1 {
			t.Fatalf("%s: %d attempts spent, accepted %d times; want 1 and 1 (a 429 spends none)", ev, rec.AttemptsSpent, accepted(s, ev))
		}
	}
}

// batchHalfway is a batch of four deliveries (prefix0-3) to a subscriber
// with 4 slots, run by a worker process: the first two answered and
// committed, the other two held open by the receiver until holding is
// cleared.
type batchHalfway struct {
	b       *crashBundle
	rc      *testkit.Sink
	w       *proc
	ids     []string
	holding *atomic.Bool
}

func startBatchHalfway(t *testing.T, prefix string) batchHalfway {
	t.Helper()
	h := batchHalfway{holding: &atomic.Bool{}}
	for i := range 4 {
		h.ids = append(h.ids, fmt.Sprintf("%s%d", prefix, i))
	}
	h.holding.Store(true)
	h.rc = testkit.NewReceiver(t, func(_ http.ResponseWriter, r *http.Request, id string) bool {
		if (id == h.ids[2] || id == h.ids[3]) && h.holding.Load() {
			<-r.Context().Done() // the worker is gone, or cut the request, before the answer
			return false
		}
		return true
	})
	h.b = newCrashBundle(t, testkit.Namespace(prefix+"-batch-"), tasks.Subscriber{ID: "s", URL: h.rc.URL, Limit: fast, MaxInFlight: 4})
	publishHeld(t, h.b.p, "s", h.ids)
	h.w = startProc(t, redisURL(), h.b.ns)
	ctx := context.Background()
	k := tasks.Keys(h.b.ns)
	testkit.Eventually(t, 10*time.Second, "two committed, two held open, in one batch task", func() bool {
		held := 0
		for _, a := range h.rc.Got() {
			if a.ID == h.ids[2] || a.ID == h.ids[3] {
				held++
			}
		}
		return held == 2 && h.b.rdb.HGet(ctx, k.Delivery("s", h.ids[0]), "s").Val() == tasks.StateDelivered &&
			h.b.rdb.HGet(ctx, k.Delivery("s", h.ids[1]), "s").Val() == tasks.StateDelivered && len(batchTasks(t, h.b.insp, h.b.ns, "s")) == 1
	})
	return h
}

// finish has a new worker deliver what is left and checks that only the
// two held were sent again.
func (h batchHalfway) finish(t *testing.T) {
	t.Helper()
	startProc(t, redisURL(), h.b.ns)
	c := settle(t, h.b.insp, h.b.rdb, h.b.ns, "s", h.ids, h.rc, 60*time.Second)
	if len(c.lost) > 0 || c.delivered != len(h.ids) {
		t.Fatalf("%s; want all delivered", c)
	}
	n := map[string]int{}
	for _, a := range h.rc.Got() {
		n[a.ID]++
	}
	for i, id := range h.ids {
		if want := 1 + i/2; n[id] != want {
			t.Fatalf("requests per event %v; want the first two once (committed before the stop), the other two twice", n)
		}
	}
}

// A worker killed (kill -9) in the middle of a batch, two of its four
// deliveries answered and committed, the other two held open by the
// receiver: the next worker sends only those two again.
func TestBatchKilledMidwaySendsOnlyTheUncommittedAgain(t *testing.T) {
	h := startBatchHalfway(t, "k")
	h.w.kill()
	h.holding.Store(false)
	expireLeases(t, h.b.rdb, h.b.ns, "s")
	h.finish(t)
}

// The dispatcher's grouping: a lane's due hand-outs in batches of at most
// the maximum, in order; a probe, a hand-out sent again and a lost run's
// each alone.
func TestBatchesGroupDueHandOutsByLane(t *testing.T) {
	f, bl := limits.WhereFresh, limits.WhereBacklog
	hs := []limits.Handout{{EventID: "a", Lane: f}, {EventID: "b", Lane: bl}, {EventID: "c", Lane: f}, {EventID: "p", Lane: f, Probe: true},
		{EventID: "d", Lane: f}, {EventID: "o", Lane: bl, Again: true}, {EventID: "r", Lane: bl, Lost: true}, {EventID: "e", Lane: bl}}
	var got []string
	for _, g := range worker.Batches(hs, 2) {
		var ids []string
		for _, o := range g {
			ids = append(ids, o.EventID)
		}
		got = append(got, strings.Join(ids, ""))
	}
	if want := []string{"ac", "be", "p", "d", "o", "r"}; !slices.Equal(got, want) {
		t.Fatalf("batches %q; want %q", got, want)
	}
}

// SIGTERM in the middle of a batch: the two requests answered are
// committed, the two the receiver holds are cut by the shutdown timeout,
// spend no attempt and go back with the batch's task, which asynq puts
// back; the next worker sends only those two again.
func TestBatchSIGTERMCommitsTheAnsweredAndPutsBackTheRest(t *testing.T) {
	h := startBatchHalfway(t, "t")
	if err := h.w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !h.w.wait(10 * time.Second) {
		t.Fatal("worker still running 10s after SIGTERM")
	}
	h.holding.Store(false)
	ctx := context.Background()
	for _, ev := range h.ids[2:] {
		rec, err := h.b.p.GetDelivery(ctx, "s", ev)
		if err != nil || rec.AttemptsSpent != 0 || rec.State != tasks.StatePending {
			t.Fatalf("%s after the shutdown: %s, %d attempts spent (%v); want pending, none spent", ev, rec.State, rec.AttemptsSpent, err)
		}
	}
	if bt := batchTasks(t, h.b.insp, h.b.ns, "s"); len(bt) != 1 {
		t.Fatalf("batch tasks after the shutdown %q; want the one put back", bt)
	}
	h.finish(t)
	for _, ev := range h.ids {
		if rec, _ := h.b.p.GetDelivery(ctx, "s", ev); rec.AttemptsSpent != 1 {
			t.Fatalf("%s: %d attempts spent; want 1 (the cut request spends none)", ev, rec.AttemptsSpent)
		}
	}
}

// A batch is one of asynq's handler slots: a worker sends no more
// requests at once than its lanes' slots would, one delivery a task (2 ×
// Concurrency), however many deliveries its batches carry.
func TestBatchesSendNoMoreAtOnceThanTheHandlerSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{Concurrency: 2})
	var now, most atomic.Int64
	s := testkit.NewReceiver(t, func(_ http.ResponseWriter, _ *http.Request, _ string) bool {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(100 * time.Millisecond)
		now.Add(-1)
		return true
	})
	const sub = "batch-cap"
	b.put(t, tasks.Subscriber{ID: sub, URL: s.URL, Limit: fast, MaxInFlight: 16})
	var ids []string
	for i := range 16 {
		ids = append(ids, fmt.Sprintf("c%02d", i))
	}
	publishHeld(t, b.p, sub, ids)
	testkit.Eventually(t, 20*time.Second, "every event delivered", func() bool {
		for _, ev := range ids {
			if rec, err := b.p.GetDelivery(ctx, sub, ev); err != nil || rec.State != tasks.StateDelivered {
				return false
			}
		}
		return true
	})
	if b.w.Stats().Batches.Load() == 0 {
		t.Fatal("no batch ran; want the 16 held events handed out together")
	}
	if m := most.Load(); m > 4 || m < 2 {
		t.Fatalf("%d requests at once; want at most 4 (2 lanes × Concurrency 2), and more than one", m)
	}
}

// A worker killed after a batch committed a delivery dead and before it
// enqueued that delivery's own task for asynq's archive: the batch runs
// again, its run finds the delivery dead and enqueues the task, which is
// archived alone; nothing is sent again.
func TestBatchKilledBeforeItsDeadCopyArchivesItOnTheRerun(t *testing.T) {
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, id string) bool {
		if id == "d2" {
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		return true
	})
	b := newCrashBundle(t, testkit.Namespace("deadcopy-"), tasks.Subscriber{ID: "s", URL: rc.URL, Limit: fast, MaxInFlight: 8, MaxAttempts: 1})
	ids := []string{"d0", "d1", "d2", "d3"}
	publishHeld(t, b.p, "s", ids)
	proxy := newFaultProxy(t, redisSrv.Addr)
	// The dead delivery's own task enqueued (its key is asynq's task key):
	// the proxy cuts the worker off from Redis there, nothing of it sent,
	// and the worker is killed.
	proxy.arm([]byte("}:t:"+tasks.TaskID("s", "d2")+"\r\n"), func() {})
	w := startProc(t, proxy.URL(), b.ns)
	testkit.Eventually(t, 20*time.Second, "the worker to enqueue the dead delivery's task", proxy.hasTripped)
	w.kill()
	ctx := context.Background()
	if s := b.rdb.HGet(ctx, tasks.Keys(b.ns).Delivery("s", "d2"), "s").Val(); s != tasks.StateDead {
		t.Fatalf("d2 %s when its task was to be enqueued; want dead (committed first)", s)
	}
	expireLeases(t, b.rdb, b.ns, "s")
	startProc(t, redisURL(), b.ns)
	c := settle(t, b.insp, b.rdb, b.ns, "s", ids, rc, 60*time.Second)
	if len(c.lost) > 0 || c.delivered != 3 || c.dead != 1 || c.requests != 4 {
		t.Fatalf("%s; want 3 delivered, d2 dead and archived, 4 requests (nothing sent again)", c)
	}
	var archived []string
	for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
		tis, err := b.insp.ListArchivedTasks(tasks.Keys(b.ns).DeliveryQueue("", "s", lane, 1))
		if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			t.Fatal(err)
		}
		for _, ti := range tis {
			archived = append(archived, ti.ID)
		}
	}
	if !slices.Equal(archived, []string{tasks.TaskID("s", "d2")}) {
		t.Fatalf("archived %q; want s:d2 alone", archived)
	}
}
