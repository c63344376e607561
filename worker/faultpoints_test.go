package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// faultModes are how a fault point stops the worker: kill -9 just before
// or just after the point's step, or the step's Redis reply lost (the step
// ran; the worker is told it failed). A point that is a moment, not a
// write (the request sent, the response read, the answer to asynq), is
// only killed at.
var faultModes = map[string][]string{
	worker.FaultTurn: {"kill-before", "kill-after", "lose"}, worker.FaultEnqueue: {"kill-before", "kill-after", "lose"},
	worker.FaultAdmit: {"kill-before", "kill-after", "lose"}, worker.FaultRequest: {"kill-before"},
	worker.FaultResponse: {"kill-before"}, worker.FaultCooldown: {"kill-before", "kill-after", "lose"},
	worker.FaultPark: {"kill-before", "kill-after", "lose"}, worker.FaultCommit: {"kill-before", "kill-after", "lose"},
	worker.FaultReadyWrite: {"kill-before", "kill-after", "lose"}, worker.FaultDone: {"kill-before"},
}

// faultRetryAfter is the 429's Retry-After of the fault-point scenario.
const faultRetryAfter = 2 * time.Second

// TestFaultPoints stops a real worker at every fault point of a delivery
// (worker/faults.go), each way, and has a new worker drain what is left:
// every event delivered, none twice but those whose request the crash cut,
// none before its Retry-After, no record left unended, nothing left in a
// lot, out or runs, no dead letter. The scenario reaches every point: a
// subscriber whose first event is answered 429 (cooldown, turn, enqueue)
// and second 500 (a backoff: turn, enqueue), the rest 200; and one with a
// single slot whose requests are held while four more wait for it (park).
func TestFaultPoints(t *testing.T) {
	testkit.Heavy(t, "kills worker processes at every fault point")
	for _, point := range worker.FaultPoints {
		modes := faultModes[point]
		if len(modes) == 0 {
			t.Fatalf("fault point %s has no modes in faultModes", point)
		}
		for _, mode := range modes {
			t.Run(point+"/"+mode, func(t *testing.T) {
				t.Parallel()
				faultAt(t, point, mode)
			})
		}
	}
}

// faultRecv is the fault-point scenario's receiver: what each event got,
// when, and what it answered.
type faultRecv struct {
	mu       sync.Mutex
	answered map[string][]int     // event → status of each request, in order
	throttle map[string]time.Time // event → when its 429 was sent
	early    []string             // requests before a 429's Retry-After that hooklane had recorded
	unknown  []string             // requests before a 429's Retry-After that a kill kept from being recorded
	// recorded reports whether subscriber sub's cooldown is in Redis: the
	// deadline hooklane knew of when an early request came.
	recorded func(sub string) bool
	holdP    bool                   // hold subscriber p's requests
	arrived  map[string][]time.Time // event → arrivals
}

func faultAt(t *testing.T, point, mode string) {
	fr := &faultRecv{answered: map[string][]int{}, throttle: map[string]time.Time{}, arrived: map[string][]time.Time{}}
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, r *http.Request, id string) bool {
		now := time.Now()
		fr.mu.Lock()
		if at, ok := fr.throttle[id]; ok && now.Before(at.Add(faultRetryAfter)) {
			// A worker killed between the 429's arrival and its cooldown's
			// write (the kill of any point may come then: other deliveries
			// reach the point while this one is on its way) leaves nothing
			// that knows the deadline: the README's "a Retry-After that
			// was never recorded cannot be obeyed". Early with the
			// cooldown in Redis is hooklane's fault.
			early := fmt.Sprintf("%s %v before its deadline", id, at.Add(faultRetryAfter).Sub(now))
			if fr.recorded(id[:1]) {
				fr.early = append(fr.early, early)
			} else {
				fr.unknown = append(fr.unknown, early)
			}
		}
		fr.arrived[id] = append(fr.arrived[id], now)
		n := len(fr.arrived[id])
		hold := fr.holdP && strings.HasPrefix(id, "p")
		status := http.StatusOK
		switch {
		case id == "s0" && n == 1:
			status = http.StatusTooManyRequests
			fr.throttle[id] = now
		case id == "s1" && n == 1:
			status = http.StatusInternalServerError
		}
		fr.answered[id] = append(fr.answered[id], status)
		fr.mu.Unlock()
		if hold {
			select {
			case <-r.Context().Done():
				return false
			case <-time.After(800 * time.Millisecond):
			}
		}
		switch status {
		case http.StatusTooManyRequests:
			w.Header().Set("Retry-After", fmt.Sprint(int(faultRetryAfter.Seconds())))
			w.WriteHeader(status)
			return false
		case http.StatusInternalServerError:
			w.WriteHeader(status)
			return false
		}
		return true
	})
	ns := testkit.Namespace("fault-")
	b := newCrashBundle(t, ns, tasks.Subscriber{ID: "s", URL: rc.URL, Limit: fast, MaxInFlight: 2, EventTypes: []string{"s"}})
	fr.mu.Lock()
	fr.recorded = func(sub string) bool {
		return b.rdb.Exists(context.Background(), tasks.Keys(ns).Gates(sub).Cooldown).Val() == 1
	}
	fr.mu.Unlock()
	p := tasks.Subscriber{ID: "p", URL: rc.URL, Limit: fast, MaxInFlight: 1, EventTypes: []string{"p"}}
	if _, err := b.p.PutSubscriber(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOOKLANE_MAX_WAIT=300ms", "HOOKLANE_FAULT=" + mode + ":" + point}
	w := startProc(t, redisURL(), ns, env...)
	// p's first event, answered at once, teaches hooklane that p is fast:
	// the next four are handed out together and wait for its one slot,
	// now held 800ms a request, longer than MaxWait: they park. They are
	// published once p000's commit has written p's latency (lt): until
	// then a destination counts as a 1 s one, whose single slot carries
	// one delivery at a time, and none would wait (the park point
	// unreached: twice in clean-clone runs, when the commit had not
	// written it, or p000 was held too, the receiver counting its arrival
	// before it looked at holdP; a sub-millisecond answer wrote none
	// before limits' latencyMilli). (MaxWait 300ms: a first answer
	// measured slower than 0.8 × MaxWait would do the same.)
	publish := func(id string) {
		if _, err := b.p.Publish(context.Background(), tasks.Event{ID: id, Type: id[:1], Data: []byte(`1`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{"p000"}
	publish(ids[0])
	testkit.Eventually(t, 10*time.Second, "p000 delivered and p's latency recorded", func() bool {
		return b.rdb.HExists(context.Background(), tasks.Keys(ns).Gates("p").Record, "lt").Val() || !w.alive()
	})
	fr.mu.Lock()
	fr.holdP = true
	fr.mu.Unlock()
	for i := 1; i < 5; i++ {
		ids = append(ids, fmt.Sprintf("p%03d", i))
		publish(ids[len(ids)-1])
	}
	for i := range 6 {
		ids = append(ids, fmt.Sprintf("s%d", i))
		publish(ids[len(ids)-1])
	}
	tripped := func() bool { return strings.Contains(w.log.String(), "fault point "+point) }
	testkit.Eventually(t, 20*time.Second, "fault point "+point+" reached", tripped)
	killed := strings.HasPrefix(mode, "kill")
	if killed {
		if !w.wait(10 * time.Second) {
			t.Fatalf("the worker outlived kill at %s", point)
		}
		for _, sub := range []string{"s", "p"} {
			expireLeases(t, b.rdb, ns, sub)
		}
		startProc(t, redisURL(), ns)
	}
	if mode == "lose" && point == worker.FaultTurn {
		// What the lost turn handed out waits in out for its lease (2 min,
		// GUARANTEES' table): moved back, as the kills' leases are, for the
		// next turn to hand it out again, once the turn's script ran (the
		// worker logs the lost reply).
		testkit.Eventually(t, 10*time.Second, "the lost turn logged", func() bool {
			return strings.Contains(w.log.String(), "dispatcher: turn failed")
		})
		for _, sub := range []string{"s", "p"} {
			out := tasks.Keys(ns).Gates(sub).Out
			for _, m := range b.rdb.ZRange(context.Background(), out, 0, -1).Val() {
				b.rdb.ZAddXX(context.Background(), out, redis.Z{Score: 1, Member: m})
			}
		}
	}
	fr.mu.Lock()
	fr.holdP = false
	fr.mu.Unlock()
	ctx := context.Background()
	k := tasks.Keys(ns)
	final := func() bool {
		for _, id := range ids {
			sub := id[:1]
			if s := b.rdb.HGet(ctx, k.Delivery(sub, id), "s").Val(); s != tasks.StateDelivered && s != tasks.StateDead {
				return false
			}
		}
		return testkit.Settled(t, b.rdb, b.insp, ns)
	}
	if !testkit.PollEvery(90*time.Second, 100*time.Millisecond, final) {
		for _, id := range ids {
			sub := id[:1]
			st, why, _ := testkit.Ended(b.insp, b.rdb, ns, sub, id)
			t.Logf("%s: record %v, task %s %s", id, b.rdb.HGetAll(ctx, k.Delivery(sub, id)).Val(), stateName(st), why)
		}
		t.Fatalf("not drained 90s after the fault at %s (%s)", point, mode)
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	twice := 0
	for _, id := range ids {
		sub := id[:1]
		if s := b.rdb.HGet(ctx, k.Delivery(sub, id), "s").Val(); s != tasks.StateDelivered {
			t.Errorf("%s ended %s; want delivered", id, s)
		}
		ok := 0
		for _, s := range fr.answered[id] {
			if s == http.StatusOK {
				ok++
			}
		}
		if ok == 0 {
			t.Errorf("%s delivered but never answered 200", id)
		}
		twice += max(ok-1, 0)
	}
	// A crash may cut the requests in flight: s's 2 slots and p's 1. A
	// lost reply in a live worker cuts at most the one request whose
	// commit it lost.
	limit := 1
	if killed {
		limit = 3
	}
	if twice > limit {
		t.Errorf("%d events delivered twice; at most %d requests were cut", twice, limit)
	}
	// Killed before the cooldown was written, nothing durable held the
	// deadline: the worker that runs the task again sends once, and obeys
	// the 429 that answers it (crashAround429's beforeCooldown too). A
	// live worker, or a kill after the write, sends nothing early.
	if len(fr.early) > 0 || len(fr.unknown) > 1 || (len(fr.unknown) > 0 && !killed) {
		t.Errorf("requests before a Retry-After deadline: %v with the cooldown in Redis, %v without it (a kill before its write allows one)", fr.early, fr.unknown)
	}
	if point == worker.FaultCooldown && mode == "kill-before" && len(fr.unknown) == 0 {
		t.Logf("cooldown/kill-before: the rerun found its deadline passed (no request before it)")
	}
	for _, sub := range []string{"s", "p"} {
		if n := b.rdb.ZCard(ctx, k.DeadIndex(sub)).Val(); n > 0 {
			t.Errorf("%d dead letters of %s; nothing here runs out of attempts or horizon", n, sub)
		}
	}
	t.Logf("%s/%s: %d events, %d delivered twice", point, mode, len(ids), twice)

}

// The fault-point table (deploy/GUARANTEES.md, Crashes and Redis faults)
// has a row for every point, and names no other.
func TestFaultPointsTableInTheGuarantees(t *testing.T) {
	b, err := os.ReadFile("../deploy/GUARANTEES.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			if i := strings.Index(name, "`"); i > 0 && strings.Contains(line[:min(len(line), i+6)], "` (") {
				rows[name[:i]] = true
			}
		}
	}
	for _, p := range worker.FaultPoints {
		if !rows[p] {
			t.Errorf("deploy/GUARANTEES.md's fault-point table has no row for %s", p)
		}
		delete(rows, p)
	}
	for r := range rows {
		t.Errorf("deploy/GUARANTEES.md's fault-point table names %s, which is no fault point", r)
	}
}
