package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
)

// die makes run token's slot lapse, as when its worker is killed: the
// slot's and the runs entry's time are moved into the past.
func (b *bundle) die(t *testing.T, ev, token string) {
	t.Helper()
	ctx := context.Background()
	if b.score(b.k.InFlight, token) < 0 {
		t.Fatalf("run %s holds no slot", token)
	}
	b.rdb.ZAdd(ctx, b.k.InFlight, redis.Z{Score: 1, Member: token})
	b.rdb.ZAdd(ctx, b.k.Runs, redis.Z{Score: 1, Member: ev})
}

// A task run again after its worker died mid-request (its record in
// flight, owned by the dead run) that finds every slot taken again parks
// the delivery, noting the lost request for its next run; before, Park
// refused a record another token owned and the handler let the only task
// go (issue 32, path 1).
func TestParkTakesOverFromARunWhoseWorkerDied(t *testing.T) {
	b := setup(t)
	b.pace.MaxInFlight = 1
	dead := b.taken(t, "e1")
	b.die(t, "e1", dead)
	live := b.taken(t, "e2") // the only slot, taken again
	rerun := limits.NewToken()
	if a := b.admit(t, "e1", rerun); !a.Busy {
		t.Fatalf("rerun of e1 with the slot taken by e2: %+v; want busy", a)
	}
	ok, err := b.g.Park(context.Background(), b.k, "e1", rerun, "scheduled", "in_flight", 0)
	if err != nil || !ok {
		t.Fatalf("Park of e1 after its run died: %v, %v; want parked", ok, err)
	}
	if s := b.rec(t, "e1", "s"); s != "scheduled" || b.score(b.k.Lot, "e1") < 0 || b.score(b.k.Runs, "e1") >= 0 {
		t.Fatalf("e1: state %q, lot %v, runs %v; want scheduled in the lot, out of runs", s, b.score(b.k.Lot, "e1"), b.score(b.k.Runs, "e1"))
	}
	b.commit(t, "e2", live, limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true})
	if a := b.admit(t, "e1", limits.NewToken()); !a.Admitted || !a.TookOver || a.Spent != 1 {
		t.Fatalf("e1's next run: %+v; want admitted, taking over the lost request (1 attempt spent)", a)
	}
}

// A live run's delivery is in runs until its slot lapses; when its worker
// dies and nothing else holds it (its task was let go), a turn hands it
// out again, marked lost; a live one is kept, rescored to its slot.
func TestTurnHandsOutADeliveryWhoseRunDied(t *testing.T) {
	b := setup(t)
	dead := b.taken(t, "e1")
	live := b.taken(t, "e2")
	if b.score(b.k.Runs, "e1") < 0 || b.score(b.k.Runs, "e2") < 0 {
		t.Fatalf("admitted, not in runs: e1 %v e2 %v", b.score(b.k.Runs, "e1"), b.score(b.k.Runs, "e2"))
	}
	b.die(t, "e1", dead)
	b.rdb.ZAdd(context.Background(), b.k.Runs, redis.Z{Score: 1, Member: "e2"}) // e2's slot is live
	r := b.turn(t)
	if len(r.Handouts) != 1 || r.Handouts[0].EventID != "e1" || !r.Handouts[0].Lost {
		t.Fatalf("turn after e1's run died: %+v; want e1 handed out again, lost", r)
	}
	if b.score(b.k.Out, "e1") < 0 || b.score(b.k.Runs, "e1") >= 0 {
		t.Fatalf("e1: out %v, runs %v; want handed out, out of runs", b.score(b.k.Out, "e1"), b.score(b.k.Runs, "e1"))
	}
	if got, slot := b.score(b.k.Runs, "e2"), b.score(b.k.InFlight, live); got != slot {
		t.Fatalf("e2 in runs at %v; want its live slot's end %v", got, slot)
	}
	if r.Next.IsZero() {
		t.Fatalf("turn with e2 running and e1 handed out: no next turn")
	}
	if a := b.admit(t, "e1", limits.NewToken()); !a.Admitted || !a.TookOver {
		t.Fatalf("e1's new run: %+v; want admitted, taking over", a)
	}
}

// A hand-out whose delivery ended, whose record is gone or is another
// generation's leaves out at its lease's end instead of being handed out
// every lease forever (issue 32, path 3); Admit's drop takes it out too.
func TestTurnDropsHandOutsThatEnded(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.parked(t, 3)
	if r := b.turn(t); len(r.Handouts) != 3 {
		t.Fatalf("%+v", r)
	}
	b.rdb.HSet(ctx, b.k.Deliveries+"e000", "s", "delivered")
	b.rdb.Del(ctx, b.k.Deliveries+"e001")
	b.rdb.HSet(ctx, b.k.Deliveries+"e002", "g", "g0")
	for _, ev := range []string{"e000", "e001", "e002"} {
		b.rdb.ZAdd(ctx, b.k.Out, redis.Z{Score: 1, Member: ev})
	}
	r := b.turn(t)
	if len(r.Handouts) != 0 || r.Stale != 3 || b.rdb.ZCard(ctx, b.k.Out).Val() != 0 {
		t.Fatalf("turn after the lease of 3 ended deliveries: %+v, %d left in out; want none handed out, 3 stale, out empty",
			r, b.rdb.ZCard(ctx, b.k.Out).Val())
	}
	if !r.Next.IsZero() {
		t.Fatalf("next turn %v; want none: nothing is left", r.Next)
	}
	b.rdb.ZAdd(ctx, b.k.Out, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "e000"})
	if a := b.admit(t, "e000", limits.NewToken()); a.Drop == "" || b.score(b.k.Out, "e000") >= 0 {
		t.Fatalf("admit of a delivered one: %+v, out %v; want dropped and out of out", a, b.score(b.k.Out, "e000"))
	}
}

// A task run again after its delivery was parked (its worker died between
// the commit and asynq's answer, or the ready write failed) is told when
// the lot entry is due, so that its run writes the ready index again;
// before, the answer carried no time and nothing wrote it (path 2).
func TestAdmitOfAParkedDeliveryTellsItsTime(t *testing.T) {
	b := setup(t)
	tok := b.taken(t, "e1")
	b.commit(t, "e1", tok, limits.Outcome{Kind: limits.OutcomeFailed, Backoff: 30 * time.Second, EndpointFailure: true})
	at := b.score(b.k.Lot, "e1")
	a := b.admit(t, "e1", limits.NewToken())
	if !a.Parked || a.Notify.UnixMilli() != int64(at) {
		t.Fatalf("rerun of a parked delivery: %+v; want parked, notify at its lot time %v", a, time.UnixMilli(int64(at)))
	}
}

// A run whose subscriber was deleted and created again while its request
// was under way does not park its delivery into the new generation's lot.
func TestCommitOfAnotherGenerationParksNothing(t *testing.T) {
	b, ctx := setup(t), context.Background()
	tok := b.taken(t, "e1")
	b.rdb.HSet(ctx, b.k.Record, "gen", "g2")
	b.commit(t, "e1", tok, limits.Outcome{Kind: limits.OutcomeFailed, Backoff: time.Second, EndpointFailure: true})
	for _, k := range []string{b.k.Lot, b.k.Out, b.k.Runs, b.k.Exp} {
		if b.score(k, "e1") >= 0 {
			t.Fatalf("e1 of generation g1 in %s after g2 was created", k)
		}
	}
}

// An interrupted run's delivery (its task put back in asynq) waits in out
// under a lease, so that a turn hands it out again if that task is lost.
func TestCommitOfAnInterruptedRunLeavesItInOut(t *testing.T) {
	b := setup(t)
	tok := b.taken(t, "e1")
	b.commit(t, "e1", tok, limits.Outcome{Kind: limits.OutcomeInterrupted})
	if b.score(b.k.Out, "e1") < 0 || b.score(b.k.Runs, "e1") >= 0 || b.rec(t, "e1", "s") != "pending" {
		t.Fatalf("interrupted: out %v, runs %v, state %q; want pending in out", b.score(b.k.Out, "e1"), b.score(b.k.Runs, "e1"),
			b.rec(t, "e1", "s"))
	}
}

// A run that dies after its second Admit (the one after the rate slot it
// booked, which files nothing in runs: the first call's entry stands for
// it) is handed out again by a turn once its slot lapses, marked lost.
func TestARunDeadAfterItsRateSlotIsHandedOutAgain(t *testing.T) {
	b := setup(t)
	b.pace.Limit = limits.Limit{Rate: 1, Burst: 1, Period: time.Minute}
	b.book(t, "a")
	b.book(t, "b")
	if a := b.admit(t, "a", limits.NewToken()); !a.Admitted {
		t.Fatalf("a: %+v; want admitted (the burst)", a)
	}
	tb := limits.NewToken()
	reserve := func(r *limits.AdmitRequest) { r.Reserve = 2 * time.Minute }
	if a := b.admit(t, "b", tb, reserve); a.SendIn <= 0 {
		t.Fatalf("b: %+v; want a rate slot ahead", a)
	}
	if a := b.admit(t, "b", tb, reserve, func(r *limits.AdmitRequest) { r.Reserved = true }); !a.Admitted {
		t.Fatalf("b after its wait: %+v; want admitted", a)
	}
	if b.score(b.k.Runs, "b") < 0 {
		t.Fatalf("b admitted after its rate slot is not in runs: nothing would find it if its worker died")
	}
	b.die(t, "b", tb)
	var lost bool
	for _, h := range b.turn(t).Handouts {
		lost = lost || h.EventID == "b" && h.Lost
	}
	if !lost || b.score(b.k.Out, "b") < 0 {
		t.Fatalf("turn after b's run died: lost hand-out %v, out %v; want b handed out again, lost", lost, b.score(b.k.Out, "b"))
	}
}

// Overdue counts a lot's head only when nothing else will move it: not
// while a delivery of the subscriber is under way (its commit asks the
// turn), nor while it is paused, cools down, waits for the breaker's probe
// or for its rate's next chunk (the last turn's wr), each of which the
// turn it arranged waits for. The heads of out, runs and exp count
// whatever holds the subscriber.
func TestOverdueCountsTheLotOnlyWhenNothingElseMovesIt(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	now := b.redisNow(t)
	ms := func(d time.Duration) float64 { return float64(now.Add(d).UnixMilli()) }
	if bk := b.book(t, "e1", func(bk *limits.Booking) { bk.NotBefore = now.Add(time.Minute) }); bk.Where != limits.WhereLot {
		t.Fatalf("booked %+v; want the lot", bk)
	}
	b.rdb.ZAdd(ctx, b.k.Lot, redis.Z{Score: ms(-10 * time.Second), Member: "e1"}) // due 10 s ago
	late := func() bool {
		t.Helper()
		_, late, err := b.g.Overdue(ctx, b.k, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return late
	}
	if !late() {
		t.Fatal("a lot due 10 s ago with nothing else to move it: not late")
	}
	for _, c := range []struct {
		name       string
		hold, free func()
	}{
		{"a run's live slot", func() { b.rdb.ZAdd(ctx, b.k.InFlight, redis.Z{Score: ms(time.Minute), Member: "tok"}) },
			func() { b.rdb.ZRem(ctx, b.k.InFlight, "tok") }},
		{"a run waiting for its rate slot", func() { b.rdb.ZAdd(ctx, b.k.Runs, redis.Z{Score: ms(time.Minute), Member: "e2"}) },
			func() { b.rdb.ZRem(ctx, b.k.Runs, "e2") }},
		{"a delivery handed out", func() { b.rdb.ZAdd(ctx, b.k.Out, redis.Z{Score: ms(time.Minute), Member: "e2"}) },
			func() { b.rdb.ZRem(ctx, b.k.Out, "e2") }},
		{"paused", func() { b.rdb.HSet(ctx, b.k.Record, "paused", "operator") }, func() { b.rdb.HDel(ctx, b.k.Record, "paused") }},
		{"cooling", func() { b.rdb.Set(ctx, b.k.Cooldown, int64(ms(time.Minute)), time.Hour) }, func() { b.rdb.Del(ctx, b.k.Cooldown) }},
		{"the breaker's next probe", func() { b.rdb.HSet(ctx, b.k.Record, "b_open", 1, "b_next", int64(ms(time.Minute))) },
			func() { b.rdb.HDel(ctx, b.k.Record, "b_open", "b_next") }},
		{"the rate's next chunk", func() { b.rdb.HSet(ctx, b.k.Record, "wr", int64(ms(time.Minute))) },
			func() { b.rdb.HDel(ctx, b.k.Record, "wr") }},
	} {
		c.hold()
		if late() {
			t.Errorf("%s: the lot counted late", c.name)
		}
		c.free()
		if !late() {
			t.Errorf("after %s: the lot not late", c.name)
		}
	}
	// out's head counts whatever holds the subscriber
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	b.rdb.ZAdd(ctx, b.k.Out, redis.Z{Score: ms(-10 * time.Second), Member: "e2"})
	if !late() {
		t.Error("a paused subscriber's hand-out lapsed 10 s ago: not late")
	}
}
