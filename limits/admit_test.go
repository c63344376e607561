package limits_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
)

func TestCooldownIsOnRedisClockAndKeepsLater(t *testing.T) {
	b, ctx := setup(t), context.Background()
	// Never before Redis' now + the delay, to the microsecond TIME gives:
	// an endpoint counts its Retry-After from its answer, which came
	// before the script ran. Each try sets a later deadline than the last.
	for range 50 {
		before := b.redisNow(t)
		until, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
		if err != nil || until.Before(before.Add(time.Minute)) {
			t.Fatalf("Retry-After 60s: cooldown until %v (%v), before Redis' now + 60s (%v)", until, err, before.Add(time.Minute))
		}
	}
	b.rdb.Del(ctx, b.k.Cooldown)
	before := b.redisNow(t)
	until, left, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
	after := b.redisNow(t)
	if err != nil || until.Before(before.Add(time.Minute)) || until.After(after.Add(time.Minute+time.Millisecond)) {
		t.Fatalf("Retry-After 60s: cooldown until %v (%v), want Redis' now + 60s, between %v and %v", until, err, before.Add(time.Minute), after.Add(time.Minute))
	}
	if left > time.Minute || left < 59*time.Second {
		t.Fatalf("left %v, want about 60s", left)
	}
	if got, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: 10 * time.Second}, time.Hour); err != nil || !got.Equal(until) {
		t.Fatalf("shorter cooldown = %v, %v; want the later %v kept", got, err, until)
	}
	// An HTTP-date is absolute; a past one means now; any is capped.
	date := after.Add(2 * time.Minute).Truncate(time.Second)
	if got, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{At: date}, time.Hour); err != nil || !got.Equal(date) {
		t.Fatalf("HTTP-date %v: cooldown %v, %v", date, got, err)
	}
	if got, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: 99 * time.Hour}, 5*time.Minute); err != nil ||
		got.After(b.redisNow(t).Add(5*time.Minute+time.Millisecond)) || !got.After(date) { // its ms rounded up
		t.Fatalf("capped cooldown %v, %v; want at most 5m from now and later than %v", got, err, date)
	}
}

// Only a delivery that no live run owns and that has not ended is taken:
// the run that took it is answered again if it asks again (a retried
// call), another run waits for the owner's slot to lapse and then takes
// over (its worker died mid-request: that request counted).
func TestAdmitTakesADeliveryOnce(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.book(t, "e1")
	one, two := limits.NewToken(), limits.NewToken()
	a := b.admit(t, "e1", one)
	if !a.Admitted || a.Spent != 0 || a.Requests != 1 || a.Max != 3 || a.EventType != "t" || b.rec(t, "e1", "s") != "in_flight" {
		t.Fatalf("first: %+v", a)
	}
	if again := b.admit(t, "e1", one); !again.Admitted || again.Spent != 0 || b.rec(t, "e1", "n") != "1" || b.rec(t, "e1", "c") != "1" {
		t.Fatalf("the same run asking again: %+v, n %s c %s; want admitted, counted once", again, b.rec(t, "e1", "n"), b.rec(t, "e1", "c"))
	}
	if other := b.admit(t, "e1", two); other.Admitted || other.OwnedFor < 55*time.Second {
		t.Fatalf("another run while the first holds its slot: %+v; want told to look again in about a minute", other)
	}
	b.rdb.ZAdd(ctx, b.k.InFlight, redis.Z{Score: 1, Member: one}) // the first run's worker died
	if over := b.admit(t, "e1", two); !over.Admitted || !over.TookOver || over.Spent != 1 || b.rec(t, "e1", "tk") != two {
		t.Fatalf("after the owner's slot lapsed: %+v; want taken over, the lost request spent", over)
	}
}

// Nothing is sent for a delivery that is gone or ended, or whose
// subscriber is another generation; a dead one's copy goes to the archive;
// one past its horizon is the run's to dead-letter; a parked one not yet
// due stays parked.
func TestAdmitRefusesWhatMustNotGo(t *testing.T) {
	b, ctx := setup(t), context.Background()
	if a := b.admit(t, "nope", limits.NewToken()); a.Drop == "" {
		t.Fatalf("no record: %+v", a)
	}
	b.book(t, "d")
	b.rdb.HSet(ctx, b.k.Deliveries+"d", "s", "delivered")
	if a := b.admit(t, "d", limits.NewToken()); a.Drop == "" {
		t.Fatalf("delivered: %+v", a)
	}
	b.book(t, "x")
	b.rdb.HSet(ctx, b.k.Deliveries+"x", "s", "dead")
	if a := b.admit(t, "x", limits.NewToken()); !a.DeadAlready {
		t.Fatalf("dead: %+v", a)
	}
	b.book(t, "h")
	b.rdb.HSet(ctx, b.k.Deliveries+"h", "x", 1)
	tok := limits.NewToken()
	if a := b.admit(t, "h", tok); !a.Expired || b.rec(t, "h", "tk") != tok {
		t.Fatalf("past its horizon: %+v; want it the run's to dead-letter", a)
	}
	b.book(t, "p", func(bk *limits.Booking) { bk.NotBefore = time.Now().Add(time.Hour) })
	if a := b.admit(t, "p", limits.NewToken()); !a.Parked || b.score(b.k.Lot, "p") < 0 {
		t.Fatalf("parked until later: %+v; want it left parked", a)
	}
	b.book(t, "g")
	b.rdb.HSet(ctx, b.k.Record, "gen", "g2")
	if a := b.admit(t, "g", limits.NewToken()); a.Drop == "" {
		t.Fatalf("another generation: %+v", a)
	}
	if n, _ := b.rdb.ZCard(ctx, b.k.InFlight).Result(); n != 0 {
		t.Fatalf("refusals took %d slots", n)
	}
}

// A gate that says "not now" parks the delivery in the lot in one step,
// in the state that says why, and says when the subscriber needs a turn;
// every in-flight slot taken writes nothing (the worker may wait for one).
func TestAdmitParksWhatCannotGo(t *testing.T) {
	b, ctx := setup(t), context.Background()
	for _, ev := range []string{"p", "b", "c", "r", "busy"} {
		b.book(t, ev)
	}
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	if a := b.admit(t, "p", limits.NewToken()); !a.Parked || a.State != "held" || !a.Notify.IsZero() || b.score(b.k.Out, "p") != -1 {
		t.Fatalf("paused: %+v; want parked held, no turn until resumed", a)
	}
	b.rdb.HDel(ctx, b.k.Record, "paused")
	now := b.redisNow(t)
	b.rdb.HSet(ctx, b.k.Record, "b_open", now.UnixMilli(), "b_next", now.Add(time.Minute).UnixMilli())
	if a := b.admit(t, "b", limits.NewToken()); !a.Parked || a.State != "held" || a.Notify.Before(now.Add(59*time.Second)) {
		t.Fatalf("breaker open, not the probe: %+v; want parked held until the probe", a)
	}
	b.rdb.HDel(ctx, b.k.Record, "b_open", "b_next")
	until, _, _ := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
	if a := b.admit(t, "c", limits.NewToken()); !a.Parked || a.State != "cooling" || !a.Notify.Equal(until) ||
		b.score(b.k.Lot, "c") != float64(until.UnixMilli()) {
		t.Fatalf("cooling: %+v; want parked until %v", a, until)
	}
	b.rdb.Del(ctx, b.k.Cooldown)
	b.pace.Limit = limits.Limit{Rate: 1, Burst: 1, Period: time.Minute}
	b.admit(t, "r", limits.NewToken()) // spends the burst
	b.book(t, "r2")
	if a := b.admit(t, "r2", limits.NewToken()); !a.Parked || a.State != "scheduled" || a.Notify.Before(b.redisNow(t).Add(58*time.Second)) {
		t.Fatalf("rate spent for a minute: %+v; want parked until its slot", a)
	}
	b.pace.Limit, b.pace.MaxInFlight = wide, 1
	b.rdb.Del(ctx, b.k.Rate) // the 1/min pace forgotten (a limit change would rescale it)
	if a := b.admit(t, "busy", limits.NewToken()); !a.Busy || b.rec(t, "busy", "s") != "pending" || b.score(b.k.Out, "busy") < 0 {
		t.Fatalf("every slot taken: %+v, state %s; want busy, nothing written", a, b.rec(t, "busy", "s"))
	}
	if n, _ := b.rdb.HGet(ctx, b.k.Stats, "deferred:held").Int(); n != 2 {
		t.Fatalf("deferred:held counted %d; want 2", n)
	}
}

// Within the reservation horizon a rate-limited delivery books the next
// rate slot and is told how long to wait; asking again once it has waited
// does not book another, but sees a pause, a 429 or a deletion that came
// meanwhile.
func TestAdmitReservesARateSlotAndLooksAgainAfter(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.Limit = limits.Limit{Rate: 1, Burst: 1, Period: time.Minute}
	reserve := func(r *limits.AdmitRequest) { r.Reserve = 2 * time.Minute }
	for _, ev := range []string{"a", "b", "c"} {
		b.book(t, ev)
	}
	b.admit(t, "a", limits.NewToken())
	tb := limits.NewToken()
	a := b.admit(t, "b", tb, reserve)
	if a.SendIn < 58*time.Second || a.SendIn > time.Minute || b.rec(t, "b", "tk") != tb {
		t.Fatalf("b: %+v; want a rate slot about a minute ahead, owned", a)
	}
	if c := b.admit(t, "c", limits.NewToken(), reserve); c.SendIn-a.SendIn < 59*time.Second {
		t.Fatalf("c: %+v; want the slot after b's", c)
	}
	after := func(r *limits.AdmitRequest) { r.Reserve, r.Reserved = 2*time.Minute, true }
	if got := b.admit(t, "b", tb, after); !got.Admitted {
		t.Fatalf("b after its wait: %+v; want admitted on its slot", got)
	}
	b.book(t, "e")
	te := limits.NewToken()
	long := func(r *limits.AdmitRequest) { r.Reserve = 4 * time.Minute }
	if e := b.admit(t, "e", te, long); e.SendIn < 2*time.Minute {
		t.Fatalf("e: %+v; want the slot after c's", e)
	}
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	if got := b.admit(t, "e", te, after); !got.Parked || got.State != "held" {
		t.Fatalf("e after its wait, paused meanwhile: %+v; want held", got)
	}
	// Deleted and created again while a reserved request waits: dropped.
	b.rdb.HDel(ctx, b.k.Record, "paused")
	b.book(t, "f")
	tf := limits.NewToken()
	if f := b.admit(t, "f", tf, long); f.SendIn <= 0 {
		t.Fatalf("f: %+v; want a slot ahead", f)
	}
	b.rdb.HSet(ctx, b.k.Record, "gen", "another")
	if got := b.admit(t, "f", tf, after); got.Admitted || got.Drop == "" {
		t.Fatalf("f after its wait, its subscriber created again meanwhile: %+v; want dropped", got)
	}
}

// The rate step is redis_rate's GCRA on redis_rate's key: both see one
// limit.
func TestAdmitSharesLimitWithRedisRate(t *testing.T) {
	b, ctx := setup(t), context.Background()
	l := limits.Limit{Rate: 5, Burst: 4, Period: time.Second}
	b.pace.Limit = l
	lim := redis_rate.NewLimiter(b.rdb)
	for i, ev := range []string{"a", "b"} {
		b.book(t, ev)
		if a := b.admit(t, ev, limits.NewToken()); !a.Admitted {
			t.Fatalf("admit %d: %+v", i, a)
		}
		res, err := lim.Allow(ctx, b.ns.RateLimiterKey("s"), l.RedisRate())
		if err != nil || res.Allowed != 1 {
			t.Fatalf("redis_rate %d: %+v, %v", i, res, err)
		}
	}
	res, err := lim.Allow(ctx, b.ns.RateLimiterKey("s"), l.RedisRate())
	if err != nil || res.Allowed != 0 {
		t.Fatalf("redis_rate after a burst of 4 spent half each way: %+v, %v", res, err)
	}
	b.book(t, "c")
	if a := b.admit(t, "c", limits.NewToken()); !a.Parked || a.State != "scheduled" {
		t.Fatalf("admit after the burst: %+v; want parked for the rate", a)
	}
}

// pipes records the commands of every pipeline a client sends.
type pipes struct {
	mu   sync.Mutex
	sent [][]string
}

func (p *pipes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		p.mu.Lock()
		p.sent = append(p.sent, []string{cmd.Name()})
		p.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (p *pipes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, c := range cmds {
			names = append(names, c.Name())
		}
		p.mu.Lock()
		p.sent = append(p.sent, names)
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

// Admit reads the stored event's body in its own round trip, whatever the
// gates answer, and a missing event is not an error; the release before's
// string is read apart, only when the hash holds none. Each round trip
// (a pipeline, or one command alone) is recorded.
func TestAdmitReadsTheStoredEventInItsRoundTrip(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ev := b.ns.Event("e1") // another slot than the gates'
	b.rdb.HSet(ctx, ev, "b", "{}")
	for _, e := range []string{"warm", "e1", "e2", "gone", "old"} {
		b.book(t, e)
	}
	b.admit(t, "warm", limits.NewToken()) // Redis knows the script from now on
	rec := &pipes{}
	b.rdb.AddHook(rec)
	read := func(key string) func(*limits.AdmitRequest) {
		return func(r *limits.AdmitRequest) { r.Read, r.ReadField = key, "b" }
	}
	if a := b.admit(t, "e1", limits.NewToken(), read(ev)); !a.Admitted || !a.Found || a.Value["b"] != "{}" || a.ReadErr != nil {
		t.Fatalf("admit with a read: %+v", a)
	}
	b.rdb.HSet(ctx, b.k.Record, "paused", "x")
	if a := b.admit(t, "e2", limits.NewToken(), read(ev)); !a.Parked || !a.Found || a.Value["b"] != "{}" {
		t.Fatalf("refused, the read still answers: %+v", a)
	}
	b.rdb.HDel(ctx, b.k.Record, "paused")
	if a := b.admit(t, "gone", limits.NewToken(), read(b.ns.Event("gone"))); !a.Admitted || a.Found || a.ReadErr != nil {
		t.Fatalf("admit reading a missing key: %+v", a)
	}
	// Stored by the release before (a string): read after, apart.
	b.rdb.Set(ctx, b.ns.LegacyEvent("old"), "1 s\n{}", 0)
	legacy := func(r *limits.AdmitRequest) {
		r.Read, r.ReadField, r.Legacy = b.ns.Event("old"), "b", b.ns.LegacyEvent("old")
	}
	if a := b.admit(t, "old", limits.NewToken(), legacy); !a.Admitted || !a.Found || a.Value[""] != "1 s\n{}" {
		t.Fatalf("admit reading the release before's stored event: %+v", a)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	together, apart := 0, 0
	for _, names := range rec.sent {
		if names[0] == "hello" || names[0] == "client" {
			continue // a new connection's handshake
		}
		if len(names) == 1 {
			if names[0] == "get" {
				apart++
			}
			continue // or the test's own writes
		}
		if len(names) != 2 || names[0] != "hget" || !strings.HasPrefix(names[1], "eval") {
			t.Errorf("a round trip of %v, want the read and the script together", names)
		}
		together++
	}
	if together != 4 || apart != 1 {
		t.Errorf("%d round trips held the read and the script, %d read the old string apart; want 4 (one per admit) and 1", together, apart)
	}
}

// A group of Admits (a batch's) is each request's Admit, in order, in one
// script: with 2 in-flight slots the first two take them and the limiter
// twice, the third finds them full and writes nothing; the group sent
// again under the same tokens (a lost reply) is recognised as itself.
func TestAdmitGroupAdmitsEachInOrder(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.MaxInFlight = 2
	b.pace.Limit = limits.Limit{Rate: 10, Burst: 10, Period: time.Second} // 100 ms a request
	evs := []string{"a1", "a2", "a3"}
	var rs []limits.AdmitRequest
	for _, ev := range evs {
		b.book(t, ev)
		rs = append(rs, limits.AdmitRequest{EventID: ev, Token: limits.NewToken(), SlotTTL: time.Minute, Pace: b.pace,
			Read: b.k.Deliveries + ev, ReadField: "s"})
	}
	before := b.redisNow(t)
	for try := range 2 {
		as, err := b.g.AdmitGroup(ctx, b.k, rs)
		if err != nil || len(as) != 3 {
			t.Fatalf("try %d: %v, %v", try, as, err)
		}
		if !as[0].Admitted || !as[1].Admitted || !as[2].Busy {
			t.Fatalf("try %d: %+v; want admitted, admitted, busy", try, as)
		}
		if !as[0].Found || as[0].Value["s"] != "pending" && as[0].Value["s"] != "in_flight" {
			t.Fatalf("try %d: the read beside it: %+v", try, as[0].Value)
		}
	}
	if n := b.rdb.ZCard(ctx, b.k.InFlight).Val(); n != 2 || b.rdb.PTTL(ctx, b.k.InFlight).Val() <= 0 {
		t.Fatalf("%d slots (ttl %v); want 2, expiring", n, b.rdb.PTTL(ctx, b.k.InFlight).Val())
	}
	for i, ev := range evs[:2] {
		if b.rec(t, ev, "s") != "in_flight" || b.rec(t, ev, "tk") != rs[i].Token || b.score(b.k.Runs, ev) < 0 {
			t.Fatalf("%s: %v; want in flight, its run's, in runs", ev, b.rdb.HGetAll(ctx, b.k.Deliveries+ev).Val())
		}
	}
	if b.rec(t, "a3", "tk") != "" || b.rec(t, "a3", "c") != "" {
		t.Fatalf("a3 busy but written: %v", b.rdb.HGetAll(ctx, b.k.Deliveries+"a3").Val())
	}
	// redis_rate's clock: seconds since 2017-01-01. The first try set it
	// (the second is the same group again): 0.2 s past a moment between
	// the reading before it and this one.
	after := b.redisNow(t)
	tat, _ := strconv.ParseFloat(b.rdb.Get(ctx, b.k.Rate).Val(), 64)
	since := func(at time.Time) float64 { return tat - (float64(at.UnixMicro())/1e6 - 1483228800) }
	if since(before) < 0.2-1e-3 || since(after) > 0.2+1e-3 {
		t.Fatalf("the limiter %.3fs ahead of the reading before the group, %.3fs of the one after; want the two admitted requests' 0.2s past a moment between", since(before), since(after))
	}
}

// A run that booked its rate slot and waits for it owns its delivery: a
// second run of the same delivery (another task of it) is told to look
// again once the first's wait and slot have lapsed, and takes nothing
// (no second rate slot booked, the record still the first's), so the
// two never take the record from each other while neither sends.
func TestAdmitLeavesADeliveryToTheRunWaitingForItsRateSlot(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.pace.Limit = limits.Limit{Rate: 1, Burst: 1, Period: time.Minute}
	reserve := func(r *limits.AdmitRequest) { r.Reserve = 2 * time.Minute }
	b.book(t, "a")
	b.book(t, "b")
	b.admit(t, "a", limits.NewToken())
	first := limits.NewToken()
	if a := b.admit(t, "b", first, reserve); a.SendIn <= 0 {
		t.Fatalf("b: %+v; want a rate slot ahead", a)
	}
	tat := b.rdb.Get(ctx, b.k.Rate).Val()
	if got := b.admit(t, "b", limits.NewToken(), reserve); got.OwnedFor <= 0 {
		t.Fatalf("b's second run: %+v; want told the first owns it", got)
	}
	if b.rec(t, "b", "tk") != first || b.rdb.Get(ctx, b.k.Rate).Val() != tat {
		t.Fatalf("b's second run took it: owner %q, limiter %s (was %s)", b.rec(t, "b", "tk"), b.rdb.Get(ctx, b.k.Rate).Val(), tat)
	}
}

// What Admit skips when it can: a run that waited for the rate slot it
// booked asks again without looking for its delivery in the lot or
// taking it out of out (its first call did both: no ZSCORE, no ZREM) or
// filing it in runs again (its first call's entry lasts as long as the
// slot: one ZADD, the slot's), and a group that finds every in-flight
// slot taken trims the lapsed ones once, not once a request (one
// ZREMRANGEBYSCORE for three).
func TestAdmitAsksLessAfterItsRateSlotAndWhenFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	b := setupOn(t, redis.NewClient(&redis.Options{Addr: srv.Addr}))
	b.pace.Limit = limits.Limit{Rate: 1, Burst: 1, Period: time.Minute}
	b.pace.MaxInFlight = 1
	for _, ev := range []string{"a", "b", "c1", "c2", "c3"} {
		b.book(t, ev)
	}
	if a := b.admit(t, "a", limits.NewToken()); !a.Admitted {
		t.Fatalf("a: %+v; want admitted", a)
	}
	b.rdb.Del(ctx, b.k.InFlight) // a's slot: b is to find one free after its wait
	tb := limits.NewToken()
	if a := b.admit(t, "b", tb, func(r *limits.AdmitRequest) { r.Reserve = 2 * time.Minute }); a.SendIn <= 0 {
		t.Fatalf("b: %+v; want a rate slot ahead", a)
	}
	before := testkit.CommandCalls(t, b.rdb)
	if a := b.admit(t, "b", tb, func(r *limits.AdmitRequest) { r.Reserve, r.Reserved = 2*time.Minute, true }); !a.Admitted {
		t.Fatalf("b after its wait: %+v; want admitted", a)
	}
	after := testkit.CommandCalls(t, b.rdb)
	if n := after["zscore"] + after["zrem"] - before["zscore"] - before["zrem"]; n != 0 || b.score(b.k.Out, "b") >= 0 || b.score(b.k.Lot, "b") >= 0 {
		t.Fatalf("b's second call: %d ZSCOREs and ZREMs, out %v, lot %v; want none, in neither", n, b.score(b.k.Out, "b"), b.score(b.k.Lot, "b"))
	}
	if n, slot, run := after["zadd"]-before["zadd"], b.score(b.k.InFlight, tb), b.score(b.k.Runs, "b"); n != 1 || run < slot-1000 {
		t.Fatalf("b's second call: %d ZADDs, its slot until %.0f, its runs entry until %.0f; want 1 (the slot), the entry lasting as long give or take a second", n, slot, run)
	}
	b.pace.Limit = wide
	b.rdb.Del(ctx, b.k.Rate)
	var rs []limits.AdmitRequest
	for _, ev := range []string{"c1", "c2", "c3"} {
		rs = append(rs, limits.AdmitRequest{EventID: ev, Token: limits.NewToken(), SlotTTL: time.Minute, Pace: b.pace})
	}
	before = testkit.CommandCalls(t, b.rdb)
	as, err := b.g.AdmitGroup(ctx, b.k, rs)
	if err != nil {
		t.Fatal(err)
	}
	after = testkit.CommandCalls(t, b.rdb)
	if !as[0].Busy || !as[1].Busy || !as[2].Busy {
		t.Fatalf("c1-c3 with b's slot taken: %+v; want busy", as)
	}
	if n := after["zremrangebyscore"] - before["zremrangebyscore"]; n != 1 {
		t.Fatalf("a group of three found the slots full: %d trims; want 1", n)
	}
}

// A lot entry beside a handed-out delivery's record (a commit that hands
// it out again while asynq may still hold its task, an entry of a deleted
// generation) goes when a run takes the delivery: a turn hands out
// whatever the lot holds without reading its record, so an entry that
// outlived its delivery would mark the delivered record pending again and
// have it sent twice. (Admit looks in the lot for every delivery it takes
// for this; skipping the look for pending records, one command a
// delivery, was tried on 2026-12-07 and is what this test refuses.)
func TestAdmitTakesALeftLotEntryWithTheDelivery(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if bk := b.book(t, "e"); bk.Where == limits.WhereLot {
		t.Fatalf("booked %+v; want straight to asynq", bk)
	}
	b.rdb.ZAdd(ctx, b.k.Lot, redis.Z{Score: float64(b.redisNow(t).Add(-time.Second).UnixMilli()), Member: "e"})
	tok := limits.NewToken()
	if a := b.admit(t, "e", tok); !a.Admitted {
		t.Fatalf("e: %+v; want admitted", a)
	}
	b.commit(t, "e", tok, limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), AttemptField: "a1",
		Attempt: `{"status":200}`, Answered: true, Limit: wide})
	if hs := b.turn(t).Handouts; len(hs) != 0 || b.score(b.k.Lot, "e") >= 0 {
		t.Fatalf("after e was delivered a turn handed out %+v (lot %v); want nothing", hs, b.score(b.k.Lot, "e"))
	}
	if s := b.rec(t, "e", "s"); s != "delivered" {
		t.Fatalf("e's record: %s; want delivered", s)
	}
}
