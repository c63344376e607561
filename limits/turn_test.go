package limits_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
)

// parked books n deliveries into "s"'s lot (held by a pause while they are
// booked) and ends the pause.
func (b *bundle) parked(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	for i := range n {
		if bk := b.book(t, fmt.Sprintf("e%03d", i)); bk.Where != limits.WhereLot {
			t.Fatalf("e%03d: %+v, want parked", i, bk)
		}
	}
	b.rdb.HDel(ctx, b.k.Record, "paused")
}

// A turn hands out what the subscriber's rate allows within the lead — no
// more while those are not taken — and says when the next rate slot comes.
func TestTurnHandsOutAtTheRate(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.Limit = limits.Limit{Rate: 10, Burst: 2, Period: time.Second}
	b.parked(t, 30)
	first := b.turn(t)
	if len(first.Handouts) != 12 {
		t.Fatalf("first turn handed out %d; want 12 (burst 2 + 10/s over the 1s lead)", len(first.Handouts))
	}
	if again := b.turn(t); len(again.Handouts) != 0 {
		t.Fatalf("a second turn at once handed out %d more; want none before those are taken", len(again.Handouts))
	}
	// The 12 taken (their rate slots spent) one by one, as workers would.
	for _, h := range first.Handouts {
		if a := b.admit(t, h.EventID, limits.NewToken(), func(r *limits.AdmitRequest) { r.Reserve = 2 * time.Second }); !a.Admitted && a.SendIn == 0 {
			t.Fatalf("%s: %+v; want admitted or its rate slot booked", h.EventID, a)
		}
	}
	now := b.redisNow(t)
	next := b.turn(t)
	// 12 slots spent from now: the next enters the 1s lead about 0.1s on.
	if len(next.Handouts) > 1 || next.Next.Before(now) || next.Next.After(now.Add(300*time.Millisecond)) {
		t.Fatalf("after the 12 were taken: %d handed out, next turn at %v (now %v); want about 100ms on",
			len(next.Handouts), next.Next, now)
	}
	if n, _ := b.rdb.ZCard(ctx, b.k.Lot).Result(); n+int64(len(next.Handouts)) != 18 {
		t.Fatalf("%d left parked", n)
	}
}

// A turn hands out to the fresh lane while fewer than FreshMax of the
// subscriber's deliveries are there, those already there counted, and the
// rest to the backlog lane.
func TestTurnCapsTheFreshLane(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.FreshMax = 4
	b.parked(t, 10)
	b.rdb.ZAdd(ctx, b.k.Fresh, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "elsewhere"})
	lanes := map[string]int{}
	for _, h := range b.turn(t).Handouts {
		lanes[h.Lane]++
	}
	if lanes[limits.WhereFresh] != 3 || lanes[limits.WhereBacklog] != 7 {
		t.Fatalf("handed out %v with one already in the fresh lane of 4; want 3 fresh, 7 backlog", lanes)
	}
	if n, _ := b.rdb.ZCard(ctx, b.k.Fresh).Result(); n != 4 {
		t.Fatalf("%d in the fresh lane; want 4", n)
	}
}

// A negative FreshMax (its tenant past its fresh rate) hands everything
// out to the backlog lane, and writes no fresh-lane entry.
func TestTurnOfAFloodingTenantUsesTheBacklogLane(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.FreshMax = -1
	b.parked(t, 5)
	lanes := map[string]int{}
	for _, h := range b.turn(t).Handouts {
		lanes[h.Lane]++
	}
	if lanes[limits.WhereBacklog] != 5 || len(lanes) != 1 {
		t.Fatalf("handed out %v; want 5 backlog", lanes)
	}
	if n, _ := b.rdb.ZCard(ctx, b.k.Fresh).Result(); n != 0 {
		t.Fatalf("%d in the fresh lane; want 0", n)
	}
}

// A subscriber paced by its rate is handed out in chunks of a quarter of
// the lead's slots, not one slot at a time: at 100/s with a 1s lead, a
// turn once its window is full hands out nothing and comes back when 25
// slots have entered the lead; then it hands out about 25.
func TestTurnHandsOutInChunks(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.Limit = limits.Limit{Rate: 100, Burst: 1, Period: time.Second}
	b.pace.MaxInFlight = 1000
	b.parked(t, 300)
	// The limiter's window set full (its theoretical arrival time a lead
	// ahead, in redis_rate's epoch), then opened by 260ms, as slots taken
	// and time passing would.
	window := func(ahead time.Duration) time.Time {
		now := b.redisNow(t)
		tat := float64(now.UnixMicro())/1e6 - 1483228800 + ahead.Seconds()
		if err := b.rdb.Set(ctx, b.k.Rate, strconv.FormatFloat(tat, 'f', -1, 64), 0).Err(); err != nil {
			t.Fatal(err)
		}
		return now
	}
	now := window(time.Second)
	full := b.turn(t)
	if len(full.Handouts) != 0 || full.Next.Before(now.Add(200*time.Millisecond)) || full.Next.After(now.Add(300*time.Millisecond)) {
		t.Fatalf("the lead's window full: %d handed out, next turn %v after now; want none, and a turn about 250ms on",
			len(full.Handouts), full.Next.Sub(now))
	}
	window(time.Second - 260*time.Millisecond)
	// 26 slots and the burst, and a few more for the time the test takes.
	if r := b.turn(t); len(r.Handouts) < 26 || len(r.Handouts) > 40 {
		t.Fatalf("260ms of slots open: %d handed out; want those 26-27, not one, not the whole lead", len(r.Handouts))
	}
}

// A held subscriber's turn hands out nothing but what is past its horizon
// (its run dead-letters it): paused; breaker open but for one probe at its
// time; cooling until its end. Each says when it needs the next turn.
func TestTurnHoldsWhatIsHeld(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.parked(t, 3)
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	r := b.turn(t)
	horizon := time.UnixMilli(int64(b.score(b.k.Exp, "e000")))
	if len(r.Handouts) != 0 || !r.Next.Equal(horizon) {
		t.Fatalf("paused: %+v; want nothing handed out and a turn at the first horizon %v", r, horizon)
	}
	b.rdb.ZAdd(ctx, b.k.Exp, redis.Z{Score: 1, Member: "e001"}) // its horizon has passed
	if r := b.turn(t); len(r.Handouts) != 1 || r.Handouts[0].EventID != "e001" {
		t.Fatalf("paused, one past its horizon: %+v; want that one handed out", r)
	}
	b.rdb.HDel(ctx, b.k.Record, "paused")

	now := b.redisNow(t)
	b.rdb.HSet(ctx, b.k.Record, "b_open", now.UnixMilli(), "b_next", now.Add(time.Minute).UnixMilli())
	if r := b.turn(t); len(r.Handouts) != 0 || r.Next.Before(now.Add(59*time.Second)) {
		t.Fatalf("breaker open, probe in a minute: %+v", r)
	}
	b.rdb.HSet(ctx, b.k.Record, "b_next", now.UnixMilli())
	r = b.turn(t)
	if len(r.Handouts) != 1 || !r.Handouts[0].Probe || b.gate("b_pe") != r.Handouts[0].EventID {
		t.Fatalf("breaker open, probe due: %+v; want one probe", r)
	}
	if r := b.turn(t); len(r.Handouts) != 0 {
		t.Fatalf("with a probe out: %+v; want no second one", r)
	}
	b.rdb.HDel(ctx, b.k.Record, "b_open", "b_next", "b_probe", "b_pe")
	b.rdb.ZAdd(ctx, b.k.Lot, redis.Z{Score: 0, Member: r.Handouts[0].EventID}) // back, as a failed probe parks it
	b.rdb.ZRem(ctx, b.k.Out, r.Handouts[0].EventID)

	until, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r := b.turn(t); len(r.Handouts) != 0 || !r.Next.Equal(until) {
		t.Fatalf("cooling: %+v; want nothing until %v", r, until)
	}
	b.rdb.Del(ctx, b.k.Cooldown)
	if r := b.turn(t); len(r.Handouts) != 2 {
		t.Fatalf("released: %+v; want the two left", r)
	}
}

// With the breaker open and the destination cooling down (a 429's
// Retry-After), no probe goes before the cooldown's end, however due it
// is: the probe is a request like any other. The turn after is at the
// cooldown's end.
func TestTurnProbesNotWhileCooling(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.parked(t, 1)
	now := b.redisNow(t)
	b.rdb.HSet(ctx, b.k.Record, "b_open", now.UnixMilli(), "b_next", now.UnixMilli())
	until, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r := b.turn(t); len(r.Handouts) != 0 || !r.Next.Equal(until) {
		t.Fatalf("breaker open, probe due, cooling: %+v; want no probe before the cooldown's end %v", r, until)
	}
	b.rdb.Del(ctx, b.k.Cooldown)
	if r := b.turn(t); len(r.Handouts) != 1 || !r.Handouts[0].Probe {
		t.Fatalf("the cooldown over: %+v; want the probe", r)
	}
}

// A slow destination gets no more hand-outs than its slots carry: what is
// in flight and handed out counts; a freed slot makes room.
func TestTurnHandsOutWhatTheSlotsCarry(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.MaxInFlight = 2
	b.rdb.HSet(ctx, b.k.Record, "lt", 500) // answers in 500ms: 2 + 0.8 × 2 × 1s/500ms = 5
	b.parked(t, 10)
	if r := b.turn(t); len(r.Handouts) != 5 {
		t.Fatalf("handed out %d; want 5", len(r.Handouts))
	}
	tok := limits.NewToken()
	if a := b.admit(t, "e000", tok); !a.Admitted {
		t.Fatalf("e000: %+v", a)
	}
	if r := b.turn(t); len(r.Handouts) != 0 {
		t.Fatalf("one taken, still 5 out or in flight: handed out %d", len(r.Handouts))
	}
	b.commit(t, "e000", tok, limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true})
	if r := b.turn(t); len(r.Handouts) != 1 {
		t.Fatalf("one delivered: handed out %d; want 1", len(r.Handouts))
	}
}

// A hand-out whose lease lapsed (its enqueue lost with its dispatcher) is
// handed out again in the same lane; a deleted subscriber's lot is
// dropped and counted.
func TestTurnHandsOutALapsedLeaseAgainAndDropsADeletedSubscribers(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.parked(t, 2)
	r := b.turn(t)
	if len(r.Handouts) != 2 {
		t.Fatalf("%+v", r)
	}
	b.rdb.ZAdd(ctx, b.k.Out, redis.Z{Score: 1, Member: "e000"})
	again := b.turn(t)
	want := r.Handouts[0]
	want.Again = true
	if len(again.Handouts) != 1 || again.Handouts[0] != want {
		t.Fatalf("after e000's lease lapsed: %+v; want it again, as %+v", again, want)
	}
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	b.book(t, "x")
	b.rdb.Del(ctx, b.k.Record)
	if d := b.turn(t); d.Dropped != 1 || !d.Next.IsZero() {
		t.Fatalf("deleted: %+v; want the parked one dropped and no next turn", d)
	}
	if n, _ := b.rdb.Exists(ctx, b.k.Lot, b.k.Out, b.k.Exp, b.k.Runs).Result(); n != 0 {
		t.Fatalf("%d schedule keys left of a deleted subscriber", n)
	}
}

// The ready index: a claim takes what is due and keeps it from other
// dispatchers; its release gives the next time, unless an earlier one was
// written meanwhile; a claim whose dispatcher died comes back.
func TestReadyIndexClaimsAndReleases(t *testing.T) {
	b, ctx := setup(t), context.Background()
	ready, claimed := b.ns.Ready(""), b.ns.Claimed("")
	now := b.redisNow(t)
	for sub, at := range map[string]time.Time{"a": {}, "b": now.Add(time.Hour)} {
		if err := b.g.Notify(ctx, ready, sub, at); err != nil {
			t.Fatal(err)
		}
	}
	subs, next, err := b.g.Claim(ctx, ready, claimed, 10)
	if err != nil || fmt.Sprint(subs) != "[a]" || !next.Equal(now.Add(time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("claim: %v, next %v, %v; want [a] and b's time", subs, next, err)
	}
	if again, _, _ := b.g.Claim(ctx, ready, claimed, 10); len(again) != 0 {
		t.Fatalf("a second claim took %v", again)
	}
	// Notified while claimed: the earlier time stands.
	b.g.Notify(ctx, ready, "a", now.Add(time.Second))
	if err := b.g.Release(ctx, ready, claimed, []string{"a"}, []time.Time{now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if s := b.score(ready, "a"); s != float64(now.Add(time.Second).UnixMilli()) {
		t.Fatalf("a's time %v; want the one notified during the claim", s)
	}
	// Released with nothing next: gone.
	b.rdb.ZAdd(ctx, ready, redis.Z{Score: 0, Member: "c"})
	if subs, _, _ := b.g.Claim(ctx, ready, claimed, 10); fmt.Sprint(subs) != "[c]" {
		t.Fatalf("claim: %v", subs)
	}
	b.g.Release(ctx, ready, claimed, []string{"c"}, []time.Time{{}})
	if b.score(ready, "c") != -1 || b.score(claimed, "c") != -1 {
		t.Fatal("c still listed after a release with nothing next")
	}
	// A lapsed claim (its dispatcher died) is due again.
	b.rdb.ZAdd(ctx, claimed, redis.Z{Score: 1, Member: "d"})
	if subs, _, _ := b.g.Claim(ctx, ready, claimed, 10); fmt.Sprint(subs) != "[d]" {
		t.Fatalf("after d's claim lapsed: %v; want it claimed again", subs)
	}
}

// After the breaker closes, the subscriber ramps up over Ramp from a tenth
// of its rate without burst: a turn at the start of the slow start hands
// out about a tenth of what the limit would (10/s, burst 1, over the 1s
// lead: 11), half-way through about half (50/s: 51), after it the limit
// (100/s, burst 100: 200). Bounded on both sides: a slow start that did
// not slow, or never ended, fails.
func TestSlowStartIsATenthOfTheRateRisingToIt(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		into     time.Duration // how far into the 10s slow start
		min, max int
	}{
		{"start", 0, 10, 13},
		{"half-way", 5 * time.Second, 48, 54},
		{"over", 11 * time.Second, 190, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			b.pace.Limit = limits.Limit{Rate: 100, Burst: 100, Period: time.Second}
			b.pace.MaxInFlight, b.pace.Ramp = 1000, 10*time.Second
			b.parked(t, 300)
			b.rdb.HSet(ctx, b.k.Record, "b_ramp", b.redisNow(t).Add(-c.into).UnixMilli()) // closed that long ago
			if n := len(b.turn(t).Handouts); n < c.min || n > c.max {
				t.Fatalf("%s into the slow start a turn handed out %d; want %d to %d", c.into, n, c.min, c.max)
			}
		})
	}
}

// A commit frees an in-flight slot, and asks the dispatcher for a turn
// when that may let a parked delivery go; not while the last turn waits
// for what no slot changes (wr: its rate's next chunk, a cooldown's end),
// whose own next turn is arranged by then.
func TestCommitAsksATurnOnlyWhenASlotHelps(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.Limit = limits.Limit{Rate: 10, Burst: 1, Period: time.Second}
	b.parked(t, 30)
	delivered := limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true}
	first := b.turn(t)
	now := b.redisNow(t)
	wr, _ := strconv.ParseInt(b.gate("wr"), 10, 64)
	if len(first.Handouts) == 0 || wr <= now.UnixMilli() || first.Next.IsZero() || first.Next.After(time.UnixMilli(wr)) {
		t.Fatalf("a turn the rate bound: %d handed out, wr %d, next %v (now %v); want wr ahead and the next turn by then",
			len(first.Handouts), wr, first.Next, now)
	}
	admitted := func(ev string) string {
		tok := limits.NewToken()
		if a := b.admit(t, ev, tok); !a.Admitted {
			t.Fatalf("%s: %+v", ev, a)
		}
		return tok
	}
	ev := first.Handouts[0].EventID
	if c := b.commit(t, ev, admitted(ev), delivered); !c.Notify.IsZero() {
		t.Fatalf("the commit asked a turn at %v while the turn waits for the rate until %d", c.Notify, wr)
	}
	// Slots bind now (2 in flight, answers in 500ms: 5 out or in flight,
	// and 10 are out): the turn says so, and a freed slot asks a turn.
	b.pace = limits.Pace{Limit: wide, MaxInFlight: 2, MaxWait: time.Second, Ramp: 10 * time.Second}
	b.rdb.HSet(ctx, b.k.Record, "lt", 500)
	if r := b.turn(t); len(r.Handouts) != 0 || b.gate("wr") != "" {
		t.Fatalf("slots full: %d handed out, wr %q; want none and no wr", len(r.Handouts), b.gate("wr"))
	}
	ev = first.Handouts[1].EventID
	c := b.commit(t, ev, admitted(ev), delivered)
	if now := b.redisNow(t); c.Notify.IsZero() || c.Notify.After(now.Add(200*time.Millisecond)) {
		t.Fatalf("a freed slot asked a turn at %v (now %v); want about 100ms on", c.Notify, now)
	}
	// A cooldown: the turn waits for its end, whatever slots free.
	end := b.redisNow(t).Add(5 * time.Second).UnixMilli()
	b.rdb.Set(ctx, b.k.Cooldown, end, time.Minute)
	if r := b.turn(t); r.Next.UnixMilli() != end || b.gate("wr") != strconv.FormatInt(end, 10) {
		t.Fatalf("cooling until %d: next %v, wr %q; want both the cooldown's end", end, r.Next.UnixMilli(), b.gate("wr"))
	}
}
