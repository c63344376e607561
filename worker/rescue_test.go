package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// crashRerunFindsSlotsFull is issue 32's path 1, black-box: a worker is
// killed with kill -9 while its two requests to a destination of two
// slots are held; a new worker takes both slots with new events before
// asynq's recoverer runs the killed tasks again, so each rerun finds the
// slots full. Before, its Park was refused (the record was the dead run's)
// and the task let go: the event was never sent again and its record said
// in_flight until it expired. Now the rerun parks it (or, failing that, a
// turn finds its lapsed run): every event arrives.
func crashRerunFindsSlotsFull(t *testing.T) {
	var hold atomic.Bool
	hold.Store(true)
	release := make(chan struct{})
	rc := testkit.NewReceiver(t, func(_ http.ResponseWriter, r *http.Request, _ string) bool {
		if hold.Load() {
			select {
			case <-r.Context().Done(): // the killed worker's
				return false
			case <-release:
			}
		}
		return true
	})
	b := newCrashBundle(t, testkit.Namespace("kill-full-"), tasks.Subscriber{ID: "s", URL: rc.URL, Limit: fast, MaxInFlight: 2})
	w := startProc(t, redisURL(), b.ns, "HOOKLANE_MAX_WAIT=300ms")
	first := b.publishN(t, "a", 2)
	testkit.Eventually(t, 10*time.Second, "both requests held", func() bool { return rc.Count() >= 2 })
	w.kill()
	expireLeases(t, b.rdb, b.ns, "s") // asynq's leases and the dead runs' slots lapse now
	startProc(t, redisURL(), b.ns, "HOOKLANE_MAX_WAIT=300ms")
	second := b.publishN(t, "b", 2) // they take both slots, and are held
	ctx := context.Background()
	k := tasks.Keys(b.ns)
	testkit.Eventually(t, 30*time.Second, "the killed tasks run again and leave their tasks", func() bool {
		for _, id := range first {
			if _, err := testkit.Task(b.insp, b.ns, tasks.TaskID("s", id)); err == nil {
				return false
			}
		}
		return true
	})
	for _, id := range first {
		t.Logf("%s after its rerun: %v", id, b.rdb.HMGet(ctx, k.Delivery("s", id), "s", "tk", "lr").Val())
	}
	close(release)
	hold.Store(false)
	ids := append(first, second...)
	c := settle(t, b.insp, b.rdb, b.ns, "s", ids, rc, 60*time.Second)
	t.Logf("%s", c)
	if len(c.lost) > 0 || c.delivered != len(ids) {
		t.Errorf("lost %v; delivered %d of %d", c.lost, c.delivered, len(ids))
	}
}

// loseOnce is a go-redis hook that fails the first command matching
// match with an error, unsent (nothing written), as a Redis fault would.
type loseOnce struct {
	match func(redis.Cmder) bool
	done  atomic.Bool
}

func (h *loseOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.match(cmd) && h.done.CompareAndSwap(false, true) {
			cmd.SetErr(errLost)
			return errLost
		}
		return next(ctx, cmd)
	}
}
func (h *loseOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.match(c) && h.done.CompareAndSwap(false, true) {
				for _, c := range cmds {
					c.SetErr(errLost)
				}
				return errLost
			}
		}
		return next(ctx, cmds)
	}
}

var errLost = errors.New("test: this command's connection was lost")

// losingProducer is a producer of namespace ns whose client fails the
// first command match selects, unsent (loseOnce): the process that made it
// dies there.
func losingProducer(t *testing.T, ns string, match func(redis.Cmder) bool) *producer.Producer {
	t.Helper()
	pc := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { pc.Close() })
	pc.AddHook(&loseOnce{match: match})
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: pc, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mentions matches a command that names s in one of its arguments.
func mentions(s string) func(redis.Cmder) bool {
	return func(c redis.Cmder) bool {
		for _, a := range c.Args() {
			if v, ok := a.(string); ok && strings.Contains(v, s) {
				return true
			}
		}
		return false
	}
}

// The rescuer gives a turn to a subscriber whose delivery is overdue with
// none due or claimed — here a publish's fast-path booking whose enqueue
// was lost (the app that published died before it could publish again):
// out holds it, no ready entry, no task. Its lease run out, the rescuer
// gives the subscriber a turn, which hands it out again: it is delivered,
// and counted rescued (no_turn, then lost_task).
func TestRescuerMovesADeliveryNothingWasMoving(t *testing.T) {
	rc := testkit.NewReceiver(t, func(http.ResponseWriter, *http.Request, string) bool { return true })
	b := setup(t, worker.Config{RescueInterval: 50 * time.Millisecond, RescueSweep: 50 * time.Millisecond})
	s := b.put(t, tasks.Subscriber{ID: "r1", URL: rc.URL, Limit: fast, MaxInFlight: 2})
	ctx := context.Background()
	p := losingProducer(t, b.ns, mentions(":t:"+tasks.TaskID(s.ID, "e1")))
	res, err := p.Publish(ctx, tasks.Event{ID: "e1", Type: "t", Data: []byte(`1`)}, nil)
	if err == nil || res.Targets[0].Outcome != producer.Failed {
		t.Fatalf("publish with its enqueue lost: %+v, %v; want failed", res, err)
	}
	k := tasks.Keys(b.ns).Gates(s.ID)
	// Two minutes later: the hand-out's lease has run out.
	b.rdb.ZAddXX(ctx, k.Out, redis.Z{Score: float64(time.Now().Add(-10 * time.Second).UnixMilli()), Member: "e1"})
	testkit.Eventually(t, 10*time.Second, "e1 delivered", func() bool { return rc.Count() == 1 })
	testkit.Eventually(t, 5*time.Second, "the rescues counted", func() bool {
		counts, _ := worker.ReadCounters(ctx, b.rdb, b.ns)
		return counts["rescued:"+worker.RescuedNoTurn] == 1 && counts["rescued:"+worker.RescuedLostTask] == 1
	})
}

// Issue 32's path 2, black-box: a delivery parked for its backoff whose
// subscriber's ready entry is lost (a failover of the ready key's master)
// is tried again once it is due: the rescuer gives the subscriber the turn
// nothing else would.
func TestRescuerGivesALostReadyEntryBack(t *testing.T) {
	var calls atomic.Int32
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ string) bool {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return false
		}
		return true
	})
	b := setup(t, worker.Config{RescueInterval: 100 * time.Millisecond, RescueSweep: 100 * time.Millisecond,
		BackoffBase: time.Second, BackoffMax: time.Second})
	s := b.put(t, tasks.Subscriber{ID: "r2", URL: rc.URL, Limit: fast, MaxInFlight: 2})
	ctx := context.Background()
	b.publish(t, "e1", "t")
	k := tasks.Keys(b.ns)
	testkit.Eventually(t, 10*time.Second, "e1 failed and parked", func() bool {
		return b.rdb.HGet(ctx, k.Delivery(s.ID, "e1"), "s").Val() == tasks.StateRetrying
	})
	testkit.Eventually(t, 5*time.Second, "its ready entry written", func() bool {
		return b.rdb.ZScore(ctx, k.Ready(""), s.ID).Err() == nil
	})
	b.rdb.ZRem(ctx, k.Ready(""), s.ID) // lost
	testkit.Eventually(t, 20*time.Second, "e1 delivered", func() bool {
		return b.rdb.HGet(ctx, k.Delivery(s.ID, "e1"), "s").Val() == tasks.StateDelivered
	})
	counts, _ := worker.ReadCounters(ctx, b.rdb, b.ns)
	t.Logf("rescued: %v", counts)
}

// Issue 32's path 3, black-box with a real worker: a subscriber with one
// slot is deleted and created again under the same id while its request
// is held; the request is then answered 500. Before, the old generation's
// delivery was parked into the new one's lot and handed out every lease,
// forever, holding the only slot: the re-created subscriber's events
// waited for it and dead-lettered at their horizon. Now the old
// generation's outcome parks nothing, and the new events are delivered.
func TestDeleteAndCreateAgainDuringAHeldRequest(t *testing.T) {
	var first atomic.Bool
	release := make(chan struct{})
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, r *http.Request, id string) bool {
		if id == "old" && first.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		return true
	})
	b := procBundle(t)
	ctx := context.Background()
	s := tasks.Subscriber{ID: "d", URL: rc.URL, Limit: fast, MaxInFlight: 1}
	b.put(t, s)
	b.publish(t, "old", "t")
	testkit.Eventually(t, 10*time.Second, "the old event's request held", func() bool { return first.Load() })
	if err := b.p.DeleteSubscriber(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	b.put(t, s)
	close(release)
	k := tasks.Keys(b.ns).Gates("d")
	testkit.Eventually(t, 10*time.Second, "the old run's outcome committed", func() bool {
		return b.rdb.ZCard(ctx, k.InFlight).Val() == 0
	})
	if n := b.rdb.ZCard(ctx, k.Lot).Val(); n != 0 {
		t.Errorf("the old generation's delivery parked into the new generation's lot (%d entries)", n)
	}
	var ids []string
	for i := range 5 {
		ids = append(ids, fmt.Sprintf("new%d", i))
		b.publish(t, ids[i], "t")
	}
	testkit.Eventually(t, 20*time.Second, "the new generation's 5 events delivered", func() bool {
		for _, id := range ids {
			if b.rdb.HGet(ctx, tasks.Keys(b.ns).Delivery("d", id), "s").Val() != tasks.StateDelivered {
				return false
			}
		}
		return true
	})
}

// A resume whose write of the ready index is lost (the web process died
// after the pause ended) is not left to the paused schedule's next turn,
// its deliveries' horizon: the rescuer gives the subscriber a turn, and
// the held deliveries go.
func TestRescuerGivesAResumeItsTurn(t *testing.T) {
	rc := testkit.NewReceiver(t, func(http.ResponseWriter, *http.Request, string) bool { return true })
	b := setup(t, worker.Config{RescueInterval: 100 * time.Millisecond, RescueSweep: 100 * time.Millisecond})
	s := b.put(t, tasks.Subscriber{ID: "r3", URL: rc.URL, Limit: fast, MaxInFlight: 2})
	ctx := context.Background()
	if err := b.p.SetPaused(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	b.publish(t, "e1", "t")
	k := tasks.Keys(b.ns)
	testkit.Eventually(t, 5*time.Second, "e1 held, its next turn at its horizon", func() bool {
		at, err := b.rdb.ZScore(ctx, k.Ready(""), s.ID).Result()
		return err == nil && at > float64(time.Now().Add(time.Hour).UnixMilli())
	})
	p := losingProducer(t, b.ns, mentions(k.Ready(""))) // the resume's ready write
	if err := p.SetPaused(ctx, s.ID, false); err == nil {
		t.Fatal("resume with its ready write lost: no error")
	}
	testkit.Eventually(t, 15*time.Second, "e1 delivered after the resume", func() bool { return rc.Count() == 1 })
}

// A delivery parked in the lot whose write of the ready index was lost
// while the subscriber had a later turn due (here an event scheduled an
// hour ahead) is not left to that turn: the rescuer gives the subscriber
// one now. (Before, any ready entry was taken for a turn due: the
// delivery waited for the hour.)
func TestRescuerBringsALateTurnForward(t *testing.T) {
	rc := testkit.NewReceiver(t, func(http.ResponseWriter, *http.Request, string) bool { return true })
	b := setup(t, worker.Config{RescueInterval: 100 * time.Millisecond, RescueSweep: 100 * time.Millisecond})
	s := b.put(t, tasks.Subscriber{ID: "r4", URL: rc.URL, Limit: fast, MaxInFlight: 2})
	ctx := context.Background()
	hour := time.Now().Add(time.Hour)
	if _, err := b.p.Publish(ctx, tasks.Event{ID: "later", Type: "t", Data: []byte(`1`)}, &producer.PublishOpts{NotBefore: hour}); err != nil {
		t.Fatal(err)
	}
	k := tasks.Keys(b.ns)
	g := k.Gates(s.ID)
	testkit.Eventually(t, 5*time.Second, "its turn an hour ahead", func() bool {
		at, err := b.rdb.ZScore(ctx, k.Ready(""), s.ID).Result()
		return err == nil && at >= float64(hour.Add(-time.Minute).UnixMilli())
	})
	p := losingProducer(t, b.ns, mentions(k.Ready(""))) // the publish's ready write
	// due in 2 s: parked in the lot, its ready write lost (the app died)
	_, _ = p.Publish(ctx, tasks.Event{ID: "soon", Type: "t", Data: []byte(`1`)}, &producer.PublishOpts{NotBefore: time.Now().Add(2 * time.Second)})
	if _, err := b.rdb.ZScore(ctx, g.Lot, "soon").Result(); err != nil {
		t.Fatalf("the event due soon is not in the lot: %v", err)
	}
	if at := b.rdb.ZScore(ctx, k.Ready(""), s.ID).Val(); at < float64(hour.Add(-time.Minute).UnixMilli()) {
		t.Fatalf("the ready write was not lost: the turn is at %v", time.UnixMilli(int64(at)))
	}
	// Ten seconds later: it has been due for eight.
	b.rdb.ZAddXX(ctx, g.Lot, redis.Z{Score: float64(time.Now().Add(-8 * time.Second).UnixMilli()), Member: "soon"})
	sent := func(id string) int {
		n := 0
		for _, a := range rc.Got() {
			if a.ID == id {
				n++
			}
		}
		return n
	}
	testkit.Eventually(t, 10*time.Second, "the event due soon delivered", func() bool { return sent("soon") == 1 })
	if n := sent("later"); n != 0 {
		t.Errorf("the event scheduled an hour ahead was sent %d times", n)
	}
	testkit.Eventually(t, 5*time.Second, "the rescue counted", func() bool {
		counts, _ := worker.ReadCounters(ctx, b.rdb, b.ns)
		return counts["rescued:"+worker.RescuedNoTurn] == 1
	})
}

// A publish parked behind a turn another asked of the ready index writes
// none (the gate's ta: limits' lua.go), so an ask whose ready write was
// lost leaves the publishes that trusted it in the same place: the
// rescuer gives the subscriber its turn, and both are delivered.
func TestRescuerDeliversWhatTrustedALostAsk(t *testing.T) {
	rc := testkit.NewReceiver(t, func(http.ResponseWriter, *http.Request, string) bool { return true })
	b := setup(t, worker.Config{RescueInterval: 100 * time.Millisecond, RescueSweep: 100 * time.Millisecond})
	s := b.put(t, tasks.Subscriber{ID: "r5", URL: rc.URL, Limit: fast, MaxInFlight: 2})
	ctx := context.Background()
	k := tasks.Keys(b.ns)
	due := time.Now().Add(2 * time.Second)              // parked in the lot however slow the host
	p := losingProducer(t, b.ns, mentions(k.Ready(""))) // the first publish's ready write
	_, _ = p.Publish(ctx, tasks.Event{ID: "first", Type: "t", Data: []byte(`1`)}, &producer.PublishOpts{NotBefore: due})
	if _, err := b.p.Publish(ctx, tasks.Event{ID: "second", Type: "t", Data: []byte(`1`)},
		&producer.PublishOpts{NotBefore: due.Add(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []string{"first", "second"} {
		if _, err := b.rdb.ZScore(ctx, k.Gates(s.ID).Lot, ev).Result(); err != nil {
			t.Fatalf("%s is not in the lot: %v", ev, err)
		}
	}
	if at, err := b.rdb.ZScore(ctx, k.Ready(""), s.ID).Result(); err == nil {
		t.Fatalf("a ready entry at %v: the first's write was not lost, or the second wrote one", time.UnixMilli(int64(at)))
	}
	testkit.Eventually(t, 20*time.Second, "both delivered", func() bool { return len(rc.Got()) == 2 })
	testkit.Eventually(t, 5*time.Second, "the rescue counted", func() bool {
		counts, _ := worker.ReadCounters(ctx, b.rdb, b.ns)
		return counts["rescued:"+worker.RescuedNoTurn] == 1
	})
}
