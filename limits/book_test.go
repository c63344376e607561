package limits_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
	"github.com/redis/go-redis/v9"
)

// A delivery due now goes straight to asynq while its destination can take
// it within the lead: its burst and its rate over the lead, as many as
// its in-flight slots can carry; the rest waits in the lot. A lot with due
// deliveries keeps the new ones behind them.
func TestBookHandsOutWhatTheDestinationCanTakeAndParksTheRest(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.Limit = limits.Limit{Rate: 10, Burst: 2, Period: time.Second}
	var fresh, lot int
	for i := range 20 {
		switch bk := b.book(t, fmt.Sprintf("e%02d", i)); bk.Where {
		case limits.WhereFresh:
			fresh++
		case limits.WhereLot:
			lot++
		default:
			t.Fatalf("e%02d: %+v", i, bk)
		}
	}
	// Burst 2 + 10/s over the 1s lead, within 100 slots (+ 80).
	if fresh != 12 || lot != 8 {
		t.Fatalf("%d handed out, %d parked; want 12 and 8 (burst 2 + 10/s × 1s)", fresh, lot)
	}
	if b.rec(t, "e00", "s") != "pending" || b.rec(t, "e19", "s") != "scheduled" || b.score(b.k.Lot, "e19") < 0 ||
		b.score(b.k.Out, "e00") < 0 || b.score(b.k.Exp, "e19") < 0 {
		t.Fatal("records and schedule do not say where the deliveries are")
	}
	// Slots, not the rate: 2 in flight, and 80% of what 2 slots free in the
	// 1s wait at the 1s latency taken until one is observed: 3.
	b2 := setupOn(t, redis.NewClient(&redis.Options{Addr: redisSrv.Addr}))
	b2.pace.MaxInFlight = 2
	n := 0
	for i := range 30 {
		if b2.book(t, fmt.Sprintf("e%02d", i)).Where != limits.WhereLot {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d handed out with 2 in-flight slots; want 3", n)
	}
	// An observed latency of 250ms leaves room for 2 + 0.8 × 2 × 4 = 8.
	b3 := setupOn(t, redis.NewClient(&redis.Options{Addr: redisSrv.Addr}))
	b3.pace.MaxInFlight = 2
	b3.rdb.HSet(ctx, b3.k.Record, "lt", 250)
	n = 0
	for i := range 30 {
		if b3.book(t, fmt.Sprintf("e%02d", i)).Where != limits.WhereLot {
			n++
		}
	}
	if n != 8 {
		t.Fatalf("%d handed out with 2 slots and 250ms answers; want 8", n)
	}
}

// Nothing goes straight to asynq while the subscriber is held: paused
// (refused unless held is asked), its breaker open, its destination
// cooling down, or not before a time; each parks in the lot in its state.
func TestBookParksWhatIsHeld(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	if bk := b.book(t, "p1", func(bk *limits.Booking) { bk.Held = false }); !bk.Paused || bk.New {
		t.Fatalf("paused, not held: %+v; want refused", bk)
	}
	if n, _ := b.rdb.Exists(ctx, b.k.Deliveries+"p1").Result(); n != 0 {
		t.Fatal("a refused booking wrote its record")
	}
	if bk := b.book(t, "p2"); bk.Where != limits.WhereLot || !bk.Held || b.rec(t, "p2", "s") != "held" {
		t.Fatalf("paused, held: %+v; want parked, held", bk)
	}
	b.rdb.HDel(ctx, b.k.Record, "paused")
	b.rdb.HSet(ctx, b.k.Record, "b_open", 1)
	if bk := b.book(t, "b1"); bk.Where != limits.WhereLot || b.rec(t, "b1", "s") != "held" {
		t.Fatalf("breaker open: %+v", bk)
	}
	b.rdb.HDel(ctx, b.k.Record, "b_open")
	if _, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if bk := b.book(t, "c1"); bk.Where != limits.WhereLot || b.rec(t, "c1", "s") != "cooling" {
		t.Fatalf("cooling: %+v", bk)
	}
	b.rdb.Del(ctx, b.k.Cooldown)
	nb := time.Now().Add(time.Hour)
	bk := b.book(t, "n1", func(bk *limits.Booking) { bk.NotBefore = nb })
	if bk.Where != limits.WhereLot || bk.Due.Before(nb.Truncate(time.Millisecond)) || b.score(b.k.Lot, "n1") != float64(nb.UnixMilli()) {
		t.Fatalf("not before an hour from now: %+v; want parked until then", bk)
	}
	b.rdb.Del(ctx, b.k.Record)
	if bk := b.book(t, "u1"); !bk.Unknown {
		t.Fatalf("no subscriber: %+v", bk)
	}
}

// A delivery booked into the lot counts as retrying (the retry set) only
// when a request was made for it: a new one never was; a resend of one
// that was tried was.
func TestBookFilesOnlyATriedDeliveryAsRetrying(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator") // every booking parks
	if bk := b.book(t, "new"); bk.Where != limits.WhereLot {
		t.Fatalf("new, paused: %+v; want parked", bk)
	}
	b.rdb.HSet(ctx, b.k.Deliveries+"tried", "g", "g1", "s", "delivered", "n", 2) // delivered after two requests
	if bk := b.book(t, "tried", func(bk *limits.Booking) { bk.Resend = true }); !bk.New || bk.Where != limits.WhereLot {
		t.Fatalf("resend, paused: %+v; want parked", bk)
	}
	if in, _ := b.rdb.SIsMember(ctx, b.k.Retry, "new").Result(); in {
		t.Fatal("a new delivery parked is filed as retrying")
	}
	if in, _ := b.rdb.SIsMember(ctx, b.k.Retry, "tried").Result(); !in {
		t.Fatal("a resend of a delivery tried before, parked, is not filed as retrying")
	}
}

// The record decides alone whether a booking is new: a re-publish in the
// same generation is a duplicate that says where the delivery is, the same
// call sent again is its own booking, another generation's record is
// replaced, and a resend starts a new series in the same record.
func TestBookTheRecordIsTheDedup(t *testing.T) {
	b, ctx := setup(t), context.Background()
	tok := limits.NewToken()
	first := b.book(t, "e1", func(bk *limits.Booking) { bk.Token = tok })
	if !first.New || first.Where != limits.WhereFresh {
		t.Fatalf("first: %+v", first)
	}
	if again := b.book(t, "e1", func(bk *limits.Booking) { bk.Token = tok }); !again.New || again.Where != limits.WhereFresh {
		t.Fatalf("the same call sent again: %+v; want its own booking", again)
	}
	dup := b.book(t, "e1")
	if !dup.Duplicate || dup.Where != limits.WhereFresh {
		t.Fatalf("re-publish: %+v; want a duplicate handed out in the fresh lane", dup)
	}
	if n, _ := b.rdb.XLen(ctx, b.k.Log).Result(); n != 1 {
		t.Fatalf("log has %d entries; want the one booking", n)
	}
	b.rdb.HSet(ctx, b.k.Deliveries+"e1", "s", "delivered")
	if dup := b.book(t, "e1"); !dup.Duplicate || dup.Where != "" {
		t.Fatalf("re-publish of a delivered one: %+v; want a duplicate with nothing to enqueue", dup)
	}
	re := b.book(t, "e1", func(bk *limits.Booking) { bk.Resend = true })
	if !re.New || b.rec(t, "e1", "r") != "1" || b.rec(t, "e1", "s") == "delivered" {
		t.Fatalf("resend: %+v, r %q, s %q", re, b.rec(t, "e1", "r"), b.rec(t, "e1", "s"))
	}
	b.rdb.HSet(ctx, b.k.Record, "gen", "g2") // deleted and created again
	if bk := b.book(t, "e1"); !bk.New || b.rec(t, "e1", "g") != "g2" || b.rec(t, "e1", "r") != "" {
		t.Fatalf("another generation: %+v; want a new record", bk)
	}
}

// A subscriber's deliveries go to the fresh lane while fewer than
// FreshMax of them are there; one leaving asynq frees its place.
func TestBookCapsTheFreshLane(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.FreshMax = 3
	var lanes []string
	for i := range 5 {
		lanes = append(lanes, b.book(t, fmt.Sprintf("e%d", i)).Where)
	}
	if fmt.Sprint(lanes) != "[fresh fresh fresh backlog backlog]" {
		t.Fatalf("lanes %v; want 3 fresh, then backlog", lanes)
	}
	b.rdb.ZRem(ctx, b.k.Fresh, "e0")
	if l := b.book(t, "e5").Where; l != limits.WhereFresh {
		t.Fatalf("after one left: %s", l)
	}
	// Past its time an entry is looked at: one whose delivery still waits
	// in the fresh queue keeps counting; one whose delivery ended goes.
	past := float64(time.Now().Add(-time.Second).UnixMilli())
	b.rdb.ZAdd(ctx, b.k.Fresh, redis.Z{Score: past, Member: "e1"}, redis.Z{Score: past, Member: "e2"})
	if l := b.book(t, "e6").Where; l != limits.WhereBacklog {
		t.Fatalf("with three still waiting in the fresh lane past their look: %s; want backlog", l)
	}
	if s := b.rdb.ZScore(ctx, b.k.Fresh, "e1").Val(); s <= past {
		t.Fatal("a waiting delivery's entry was not given more time")
	}
	b.rdb.HSet(ctx, b.k.Deliveries+"e2", "s", tasks.StateDelivered)
	b.rdb.ZAdd(ctx, b.k.Fresh, redis.Z{Score: past, Member: "e2"})
	if l := b.book(t, "e7").Where; l != limits.WhereFresh {
		t.Fatalf("after an ended delivery's entry came up: %s; want fresh", l)
	}
}

// A negative FreshMax (its tenant past its fresh rate): the backlog lane.
func TestBookOfAFloodingTenantUsesTheBacklogLane(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.FreshMax = -1
	if l := b.book(t, "e0").Where; l != limits.WhereBacklog {
		t.Fatalf("lane %s; want backlog", l)
	}
	if n, _ := b.rdb.ZCard(ctx, b.k.Fresh).Result(); n != 0 {
		t.Fatalf("%d in the fresh lane; want 0", n)
	}
}

// A subscriber with a backlog in asynq (BatchAfter of its deliveries
// handed out and not yet taken by a worker) has its new events parked,
// for a turn to hand out in batches, however much its limits allow; once a
// run takes one, the next goes at once again.
func TestBookParksBehindABacklogInAsynq(t *testing.T) {
	b := setup(t)
	b.pace.BatchAfter = 3
	var where []string
	for i := range 5 {
		where = append(where, b.book(t, fmt.Sprintf("e%d", i)).Where)
	}
	want := []string{limits.WhereFresh, limits.WhereFresh, limits.WhereFresh, limits.WhereLot, limits.WhereLot}
	if !slices.Equal(where, want) {
		t.Fatalf("booked to %v; want %v: 3 waiting in asynq, the rest parked", where, want)
	}
	// A run takes e0 out of out: 2 wait, the next goes at once — unless a
	// due delivery waits in the lot before it (e3, e4): it joins them.
	b.rdb.ZRem(context.Background(), b.k.Out, "e0")
	if w := b.book(t, "e5").Where; w != limits.WhereLot {
		t.Fatalf("e5 behind 2 parked: %s; want the lot", w)
	}
	b.rdb.ZRem(context.Background(), b.k.Lot, "e3", "e4", "e5")
	if w := b.book(t, "e6").Where; w != limits.WhereFresh {
		t.Fatalf("e6 with 2 waiting in asynq and none parked: %s; want it handed out at once", w)
	}
}

// The delivery log outlives every record booked into it, lengthened 10
// min further than a record needs; when it ends is kept in the gate
// record (lx), so a booking within those 10 min does not look at the
// log's PTTL. A booking that needs longer (a delivery due later) looks and
// lengthens it, and never shortens a log the release before lengthened
// further without writing lx.
func TestBookLengthensTheLogOnlyWhenARecordNeedsIt(t *testing.T) {
	b, ctx := setup(t), context.Background()
	const dedup, horizon, margin = time.Hour, time.Hour, 10 * time.Minute
	b.book(t, "e1")
	ttl := b.rdb.PTTL(ctx, b.k.Log).Val()
	if ttl < dedup+horizon+margin-time.Minute || ttl > dedup+horizon+margin {
		t.Fatalf("the log lives %v; want about %v (its record's %v, + 10 min)", ttl, dedup+horizon+margin, dedup+horizon)
	}
	lx, _ := b.rdb.HGet(ctx, b.k.Record, "lx").Int64()
	if end := b.redisNow(t).Add(ttl); lx < end.Add(-time.Minute).UnixMilli() || lx > end.Add(time.Minute).UnixMilli() {
		t.Fatalf("gate lx %d; want the log's end, %d", lx, end.UnixMilli())
	}
	// lx says the log lives long enough: a booking does not look at it (a
	// log whose TTL was cut by hand stays cut)
	b.rdb.PExpire(ctx, b.k.Log, time.Minute)
	b.book(t, "e2")
	if ttl := b.rdb.PTTL(ctx, b.k.Log).Val(); ttl > time.Minute {
		t.Fatalf("the log lives %v after a booking within lx; want it not looked at (1m)", ttl)
	}
	// a delivery due in a day needs the log a day longer: looked at and
	// lengthened, lx with it
	b.book(t, "e3", func(bk *limits.Booking) { bk.NotBefore = time.Now().Add(24 * time.Hour) })
	want := 24*time.Hour + dedup + horizon + margin
	if ttl := b.rdb.PTTL(ctx, b.k.Log).Val(); ttl < want-time.Minute || ttl > want {
		t.Fatalf("the log lives %v after a booking due in a day; want about %v", ttl, want)
	}
	// the release before lengthened it by a week without writing lx: a
	// booking whose record may outlive lx looks at the log, and keeps the
	// week
	b.rdb.PExpire(ctx, b.k.Log, 7*24*time.Hour)
	b.rdb.HSet(ctx, b.k.Record, "lx", 1)
	b.book(t, "e4")
	if ttl := b.rdb.PTTL(ctx, b.k.Log).Val(); ttl < 7*24*time.Hour-time.Minute {
		t.Fatalf("the log lives %v; want the week the release before gave it, not shortened", ttl)
	}
	if lx, _ := b.rdb.HGet(ctx, b.k.Record, "lx").Int64(); lx < b.redisNow(t).Add(7*24*time.Hour-time.Minute).UnixMilli() {
		t.Fatalf("gate lx %d; want the week's end", lx)
	}
}

// A subscriber deleted and created again, an event id published to both
// generations: the old generation's lot entry of it (here scheduled an
// hour ahead) goes with its record, and the new delivery is taken at
// once. (Before, its Admit read the new task as a stale one and parked it
// until the old entry's hour.)
func TestBookDropsTheOldGenerationsPlaceOfTheEvent(t *testing.T) {
	b, ctx := setup(t), context.Background()
	hour := b.redisNow(t).Add(time.Hour)
	if bk := b.book(t, "e1", func(bk *limits.Booking) { bk.NotBefore = hour }); bk.Where != limits.WhereLot {
		t.Fatalf("first generation: %+v; want parked in the lot", bk)
	}
	b.rdb.HSet(ctx, b.k.Record, "gen", "g2") // deleted and created again
	bk := b.book(t, "e1")
	if !bk.New || bk.Where == limits.WhereLot {
		t.Fatalf("second generation: %+v; want a new booking straight to asynq", bk)
	}
	if at := b.score(b.k.Lot, "e1"); at >= 0 {
		t.Fatalf("the old generation's lot entry is still there, at %v", time.UnixMilli(int64(at)))
	}
	if a := b.admit(t, "e1", limits.NewToken()); !a.Admitted {
		t.Fatalf("the new generation's delivery: %+v; want admitted", a)
	}
}
