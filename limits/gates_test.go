package limits_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

var redisSrv *deploy.Redis

func TestMain(m *testing.M) { testkit.Main(m, &redisSrv) }

// bundle is one test's gates, namespace and client.
type bundle struct {
	g   *limits.Gates
	rdb *redis.Client
	ns  tasks.Keys
	k   limits.GateKeys // subscriber "s"
}

// setup registers subscriber "s" (generation "g1") in a namespace of the
// test's own.
func setup(t *testing.T) *bundle {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { c.Close() })
	ns := tasks.Keys(testkit.Namespace("t"))
	b := &bundle{g: limits.NewGates(c), rdb: c, ns: ns, k: ns.Gates("s")}
	if err := c.HSet(context.Background(), b.k.Record, "gen", "g1").Err(); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bundle) admit(t *testing.T, r limits.AdmitRequest) limits.Admission {
	t.Helper()
	if r.MaxInFlight == 0 {
		r.MaxInFlight = 100
	}
	if r.Limit.IsZero() {
		r.Limit = wide
	}
	if r.SlotTTL == 0 {
		r.SlotTTL = time.Minute
	}
	a, err := b.g.Admit(context.Background(), b.k, r)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var wide = limits.Limit{Rate: 1000, Burst: 1000, Period: time.Second}

// redisNow is Redis' clock, which every gate compares against.
func (b *bundle) redisNow(t *testing.T) time.Time {
	t.Helper()
	now, err := b.rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func TestCooldownIsOnRedisClockAndKeepsLater(t *testing.T) {
	b, ctx := setup(t), context.Background()
	before := b.redisNow(t)
	until, left, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
	after := b.redisNow(t)
	if err != nil || until.Before(before.Add(time.Minute).Truncate(time.Millisecond)) || until.After(after.Add(time.Minute)) {
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
		got.After(b.redisNow(t).Add(5*time.Minute)) || !got.After(date) {
		t.Fatalf("capped cooldown %v, %v; want at most 5m from now and later than %v", got, err, date)
	}
}

func TestAdmitCapsInFlightAndExpiresSlots(t *testing.T) {
	b, ctx := setup(t), context.Background()
	r := limits.AdmitRequest{MaxInFlight: 2, SlotTTL: 300 * time.Millisecond}
	first, second := b.admit(t, r), b.admit(t, r)
	if !first.Admitted() || !second.Admitted() {
		t.Fatalf("first two: %+v %+v", first, second)
	}
	if a := b.admit(t, r); !a.Busy {
		t.Fatalf("third with max 2: %+v, want busy", a)
	}
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { b.g.ReleaseIn(ctx, p, b.k, first.Token); return nil }); err != nil {
		t.Fatal(err)
	}
	if a := b.admit(t, r); !a.Admitted() {
		t.Fatalf("after release: %+v", a)
	}
	// second was never released, as by a crashed worker: it frees itself.
	testkit.Eventually(t, 5*time.Second, "the expired slot reclaimed", func() bool { return b.admit(t, r).Admitted() })
}

func TestAdmitRefusals(t *testing.T) {
	b, ctx := setup(t), context.Background()
	if _, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if a := b.admit(t, limits.AdmitRequest{}); a.CoolFor < 59*time.Second || a.Admitted() {
		t.Fatalf("during cooldown: %+v, want cooling about a minute", a)
	}
	if a := b.admit(t, limits.AdmitRequest{NotBefore: time.Now().Add(time.Hour)}); a.NotBefore < 59*time.Minute || a.Admitted() {
		t.Fatalf("not before an hour from now: %+v", a)
	}
	if a := b.admit(t, limits.AdmitRequest{Gen: "g0"}); !a.Unknown {
		t.Fatalf("a task of an older generation: %+v, want unknown", a)
	}
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	if a := b.admit(t, limits.AdmitRequest{Gen: "g1"}); a.Paused != "operator" {
		t.Fatalf("paused: %+v", a)
	}
	b.rdb.Del(ctx, b.k.Record)
	if a := b.admit(t, limits.AdmitRequest{}); !a.Unknown {
		t.Fatalf("deleted: %+v", a)
	}
	if n, _ := b.rdb.ZCard(ctx, b.k.InFlight).Result(); n != 0 {
		t.Fatalf("refusals took %d slots", n)
	}
}

// Within the reservation horizon a rate-limited request is booked the next
// slot and told how long to wait; past it, it is refused with the wait.
func TestAdmitRateLimitReserves(t *testing.T) {
	b := setup(t)
	l := limits.Limit{Rate: 1, Burst: 3, Period: time.Minute} // one per minute: nothing refills during the test
	for i := range 3 {
		if a := b.admit(t, limits.AdmitRequest{Limit: l}); !a.Admitted() || a.SendIn != 0 {
			t.Fatalf("request %d of the burst: %+v", i, a)
		}
	}
	if a := b.admit(t, limits.AdmitRequest{Limit: l}); a.Admitted() || a.Wait < 58*time.Second || a.Wait > time.Minute {
		t.Fatalf("4th request, no reservation: %+v; want a wait of about a minute", a)
	}
	a := b.admit(t, limits.AdmitRequest{Limit: l, Reserve: 2 * time.Minute, MaxInFlight: 3})
	if !a.Reserved() || a.Admitted() || a.SendIn < 58*time.Second || a.SendIn > time.Minute {
		t.Fatalf("4th request, reserving up to 2m: %+v; want a slot booked about a minute ahead, no in-flight slot yet", a)
	}
	next := b.admit(t, limits.AdmitRequest{Limit: l, Reserve: 3 * time.Minute, MaxInFlight: 3})
	if gap := next.SendIn - a.SendIn; !next.Reserved() || gap < time.Minute-time.Second || gap > time.Minute {
		t.Fatalf("5th request: %+v, %v after the 4th; want one interval (1m) after it", next, gap)
	}
	// The three of the burst hold the three in-flight slots: a booked
	// request that comes to Take waits, and takes one once it is free.
	ctx := context.Background()
	if got, err := b.g.Take(ctx, b.k, "", 3, time.Minute); err != nil || !got.Busy {
		t.Fatalf("Take with every slot held: %+v, %v; want busy", got, err)
	}
	b.rdb.Del(ctx, b.k.InFlight)
	if got, err := b.g.Take(ctx, b.k, "", 3, time.Minute); err != nil || !got.Admitted() {
		t.Fatalf("Take with a slot free: %+v, %v", got, err)
	}
	// A 429 recorded meanwhile holds a booked request too.
	if _, _, err := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, err := b.g.Take(ctx, b.k, "", 3, time.Minute); err != nil || got.CoolFor < 59*time.Second {
		t.Fatalf("Take during a cooldown: %+v, %v; want cooling", got, err)
	}
}

// The rate step is redis_rate's GCRA on redis_rate's key: both see one limit.
func TestAdmitSharesLimitWithRedisRate(t *testing.T) {
	b, ctx := setup(t), context.Background()
	l := limits.Limit{Rate: 5, Burst: 4, Period: time.Second}
	lim := redis_rate.NewLimiter(b.rdb)
	for i := range 2 {
		if a := b.admit(t, limits.AdmitRequest{Limit: l}); !a.Admitted() {
			t.Fatalf("admit %d: %+v", i, a)
		}
		res, err := lim.Allow(ctx, b.ns.RateLimiterKey("s"), l.RedisRate())
		if err != nil || res.Allowed != 1 {
			t.Fatalf("redis_rate %d: %+v, %v", i, res, err)
		}
	}
	start := time.Now()
	res, err := lim.Allow(ctx, b.ns.RateLimiterKey("s"), l.RedisRate())
	if err != nil || res.Allowed != 0 {
		t.Fatalf("redis_rate after a burst of 4 spent half each way: %+v, %v", res, err)
	}
	a := b.admit(t, limits.AdmitRequest{Limit: l})
	// The two waits were read apart by the time between the calls: they
	// agree to within that.
	if d := a.Wait - res.RetryAfter; a.Admitted() || d > time.Millisecond || -d > time.Since(start)+time.Millisecond {
		t.Fatalf("admit wait %v vs redis_rate RetryAfter %v (%v apart): they should agree", a.Wait, res.RetryAfter, time.Since(start))
	}
}

func TestBookSpacesSlotsAndBooksARepublishNothing(t *testing.T) {
	b, ctx := setup(t), context.Background()
	l := limits.Limit{Rate: 10, Burst: 2, Period: time.Second}
	bs := make([]limits.Booking, 6)
	for i := range bs {
		bs[i] = limits.Booking{Keys: b.k, Limit: l, EventID: string(rune('a' + i)), TaskID: "s:" + string(rune('a'+i)), RecordTTL: time.Minute}
	}
	start := time.Now()
	got, err := b.g.Book(ctx, bs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range got {
		if x.Duplicate || x.Unknown || x.Gen != "g1" {
			t.Fatalf("booking %d: %+v", i, x)
		}
	}
	// The burst is due now; then one slot per interval, computed in Redis
	// from one cursor (exact, whatever the time between calls).
	for i, x := range got[:2] {
		if x.In > time.Since(start) {
			t.Errorf("burst slot %d in %v, want now", i, x.In)
		}
	}
	for i := 3; i < len(got); i++ {
		if gap := got[i].At.Sub(got[i-1].At); gap < 99*time.Millisecond || gap > 101*time.Millisecond {
			t.Errorf("slot %d is %v after slot %d, want 100ms", i, gap, i-1)
		}
	}
	// A re-publish of the same events books nothing: the cursor stays put.
	again, err := b.g.Book(ctx, bs[5])
	if err != nil || !again[0].Duplicate {
		t.Fatalf("re-publish: %+v, %v; want a duplicate", again, err)
	}
	fresh, err := b.g.Book(ctx, limits.Booking{Keys: b.k, Limit: l, EventID: "z", TaskID: "s:z", RecordTTL: time.Minute})
	if gap := fresh[0].At.Sub(got[5].At); err != nil || gap > 101*time.Millisecond || gap < 99*time.Millisecond {
		t.Fatalf("the next new event is %v after the last booked one (%v); want one interval: the duplicate took no slot", gap, err)
	}
	// Slots a second or more ahead are parked in the waiting index.
	if n, _ := b.g.WaitingCount(ctx, b.k); n != 0 {
		t.Fatalf("%d parked; every slot here is within the second", n)
	}
}

// Events due at a future time are paced from that time on a cursor of
// their own: they do not push back events published for now.
func TestNotBeforeBookingsDoNotDelayTheRest(t *testing.T) {
	b, ctx := setup(t), context.Background()
	l := limits.Limit{Rate: 1, Burst: 1, Period: time.Second}
	nb := time.Now().Add(time.Hour)
	var bs []limits.Booking
	for i := range 5 {
		id := string(rune('a' + i))
		bs = append(bs, limits.Booking{Keys: b.k, Limit: l, EventID: id, TaskID: "s:" + id, RecordTTL: time.Minute, NotBefore: nb})
	}
	later, err := b.g.Book(ctx, bs...)
	if err != nil {
		t.Fatal(err)
	}
	if later[0].In < 59*time.Minute || later[4].At.Sub(later[0].At) != 4*time.Second {
		t.Fatalf("not-before bookings %+v; want from an hour on, a second apart", later)
	}
	now, err := b.g.Book(ctx, limits.Booking{Keys: b.k, Limit: l, EventID: "now", TaskID: "s:now", RecordTTL: time.Minute})
	if err != nil || now[0].In > time.Second {
		t.Fatalf("an event for now after them: in %v (%v); want now", now[0].In, err)
	}
	if n, _ := b.g.WaitingCount(ctx, b.k); n != 5 {
		t.Fatalf("%d parked, want the 5 not-before events", n)
	}
}

func TestBookRefusesPausedUnlessHeldAndUnknown(t *testing.T) {
	b, ctx := setup(t), context.Background()
	b.rdb.HSet(ctx, b.k.Record, "paused", "operator")
	bk := limits.Booking{Keys: b.k, Limit: wide, EventID: "e", TaskID: "s:e", RecordTTL: time.Minute}
	if got, err := b.g.Book(ctx, bk); err != nil || !got[0].Paused {
		t.Fatalf("paused: %+v, %v", got, err)
	}
	// Refused, it wrote nothing: held, it books.
	bk.Held = true
	if got, err := b.g.Book(ctx, bk); err != nil || got[0].Paused || got[0].Duplicate || !got[0].Held {
		t.Fatalf("held: %+v, %v; want booked and marked held", got, err)
	}
	b.rdb.HDel(ctx, b.k.Record, "paused")
	bk.EventID, bk.TaskID = "e2", "s:e2"
	if got, err := b.g.Book(ctx, bk); err != nil || got[0].Held {
		t.Fatalf("held booking of a subscriber not paused: %+v, %v; want not marked held", got, err)
	}
	other := b.ns.Gates("nobody")
	if got, err := b.g.Book(ctx, limits.Booking{Keys: other, Limit: wide, EventID: "e", TaskID: "nobody:e", RecordTTL: time.Minute}); err != nil || !got[0].Unknown {
		t.Fatalf("unknown subscriber: %+v, %v", got, err)
	}
}

func TestParkBooksOnlyWhenAsked(t *testing.T) {
	b, ctx := setup(t), context.Background()
	l := limits.Limit{Rate: 1, Burst: 1, Period: time.Minute}
	first, err := b.g.Park(ctx, limits.Parking{Keys: b.k, Limit: l, Member: "s:1@q", Book: true})
	if err != nil {
		t.Fatal(err)
	}
	// A busy or paused task waits its hold and takes nobody's slot.
	if in, err := b.g.Park(ctx, limits.Parking{Keys: b.k, Limit: l, Member: "s:busy@q", Hold: time.Second}); err != nil || in > time.Second {
		t.Fatalf("unbooked park in %v, %v; want the 1s hold", in, err)
	}
	second, err := b.g.Park(ctx, limits.Parking{Keys: b.k, Limit: l, Member: "s:2@q", Book: true})
	if gap := second - first; err != nil || gap < 59*time.Second || gap > time.Minute {
		t.Fatalf("second booked park %v after the first (%v); want one interval, the unbooked one took none", gap, err)
	}
	if n, _ := b.g.WaitingCount(ctx, b.k); n != 3 {
		t.Fatalf("waiting index holds %d, want 3", n)
	}
}

// A subscriber's tasks due now go to the fresh lane while fewer than
// FreshMax of them are there; one ending frees its place. Tasks due later
// go to the backlog lane whatever the count.
func TestBookCapsTheFreshLane(t *testing.T) {
	b, ctx := setup(t), context.Background()
	book := func(id string, nb time.Time) string {
		t.Helper()
		got, err := b.g.Book(ctx, limits.Booking{Keys: b.k, Limit: wide, EventID: id, TaskID: "s:" + id, RecordTTL: time.Minute,
			NotBefore: nb, FreshMax: 2, FreshQueue: "f", BacklogQueue: "b"})
		if err != nil {
			t.Fatal(err)
		}
		return got[0].Queue
	}
	if q := book("later", time.Now().Add(time.Hour)); q != "b" {
		t.Fatalf("an event for later went to %q, want the backlog lane", q)
	}
	for i, want := range []string{"f", "f", "b", "b"} {
		if q := book(string(rune('a'+i)), time.Time{}); q != want {
			t.Fatalf("event %d went to %q, want %q", i, q, want)
		}
	}
	p := b.rdb.Pipeline()
	b.g.LeftFreshIn(ctx, p, b.k, "s:a")
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if q := book("e", time.Time{}); q != "f" {
		t.Fatalf("after one left the fresh lane, the next went to %q, want it", q)
	}
	if q := book("f", time.Time{}); q != "b" {
		t.Fatalf("with the lane full again, the next went to %q, want the backlog", q)
	}
	if ttl := b.rdb.PTTL(ctx, b.k.Fresh).Val(); ttl <= 0 || ttl > limits.FreshTTL {
		t.Fatalf("fresh-lane set ttl %v, want at most %v", ttl, limits.FreshTTL)
	}
}

// The delivery record is the booking: a re-publish is a duplicate, and
// "taken" once Admit let its task go (asynq then forgets the task, the
// record does not); a resend books it again in the same record.
func TestBookingRecordTakenAndResent(t *testing.T) {
	b, ctx := setup(t), context.Background()
	wide := limits.Limit{Rate: 1000, Burst: 1000, Period: time.Second}
	bk := limits.Booking{Keys: b.k, Limit: wide, EventID: "e", EventType: "video.x", TaskID: "s:e", RecordTTL: time.Minute}
	rec := b.k.Deliveries + "e"
	if got, err := b.g.Book(ctx, bk); err != nil || got[0].Duplicate {
		t.Fatalf("first booking: %+v, %v", got, err)
	}
	h, _ := b.rdb.HGetAll(ctx, rec).Result()
	if h["s"] != "pending" || h["t"] != "video.x" || h["g"] != "g1" || h["n"] != "" {
		t.Fatalf("record after booking: %v", h)
	}
	if ttl := b.rdb.PTTL(ctx, rec).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("record ttl %v; want the marker ttl", ttl)
	}
	if got, _ := b.g.Book(ctx, bk); !got[0].Duplicate || got[0].Taken {
		t.Fatalf("re-publish before any worker took it: %+v; want a duplicate, not taken", got[0])
	}
	if a := b.admit(t, limits.AdmitRequest{Limit: wide, MaxInFlight: 10, SlotTTL: time.Minute, Record: rec}); !a.Admitted() {
		t.Fatalf("admit: %+v", a)
	}
	if s := b.rdb.HGet(ctx, rec, "s").Val(); s != "in_flight" {
		t.Fatalf("record state after Admit: %q; want in_flight", s)
	}
	if got, _ := b.g.Book(ctx, bk); !got[0].Duplicate || !got[0].Taken {
		t.Fatalf("re-publish after Admit: %+v; want a duplicate, taken", got[0])
	}
	bk.Resend = true
	if got, _ := b.g.Book(ctx, bk); got[0].Duplicate {
		t.Fatalf("resend: %+v; want booked again", got[0])
	}
	h, _ = b.rdb.HGetAll(ctx, rec).Result()
	if h["s"] != "pending" || h["r"] != "1" || h["t"] != "video.x" {
		t.Fatalf("record after the resend: %v; want pending, one resend, the rest kept", h)
	}
	if n := b.rdb.XLen(ctx, b.k.Log).Val(); n != 1 {
		t.Fatalf("%d log entries; want the one of the first publish", n)
	}
}

// A request that waited for a rate-limit slot booked ahead takes its
// in-flight slot with Take: that is when its record goes in flight, not
// when the slot was booked.
func TestTakeMarksTheRecordInFlight(t *testing.T) {
	b, ctx := setup(t), context.Background()
	l := limits.Limit{Rate: 1, Burst: 1, Period: time.Second}
	bk := limits.Booking{Keys: b.k, Limit: limits.Limit{Rate: 1000, Burst: 1000, Period: time.Second}, EventID: "e", TaskID: "s:e", RecordTTL: time.Minute}
	if _, err := b.g.Book(ctx, bk); err != nil {
		t.Fatal(err)
	}
	rec := b.k.Deliveries + "e"
	if a := b.admit(t, limits.AdmitRequest{Limit: l, MaxInFlight: 10, SlotTTL: time.Minute}); !a.Admitted() {
		t.Fatalf("first admit (the burst): %+v", a)
	}
	if a := b.admit(t, limits.AdmitRequest{Limit: l, MaxInFlight: 10, SlotTTL: time.Minute, Reserve: 2 * time.Second, Record: rec}); !a.Reserved() {
		t.Fatalf("second admit: %+v; want a slot reserved ahead", a)
	}
	if s := b.rdb.HGet(ctx, rec, "s").Val(); s != "pending" {
		t.Fatalf("record state with a slot reserved: %q; want pending", s)
	}
	if a, err := b.g.Take(ctx, b.k, rec, 10, time.Minute); err != nil || !a.Admitted() {
		t.Fatalf("take: %+v, %v", a, err)
	}
	if s := b.rdb.HGet(ctx, rec, "s").Val(); s != "in_flight" {
		t.Fatalf("record state after Take: %q; want in_flight", s)
	}
}

// pipes records the commands of every pipeline a client sends.
type pipes struct {
	mu   sync.Mutex
	sent [][]string
}

func (p *pipes) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *pipes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
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

// Admit reads AdmitRequest.Read (the stored event) in its own round trip,
// whatever the gates answer, and a missing key is not an error.
func TestAdmitReadsTheStoredEventInItsRoundTrip(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ev := b.ns.Event("e1") // another slot than the gates'
	if err := b.rdb.Set(ctx, ev, "1 s\n{}", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	b.admit(t, limits.AdmitRequest{}) // Redis knows the script from now on
	rec := &pipes{}
	b.rdb.AddHook(rec)
	if a := b.admit(t, limits.AdmitRequest{Read: ev}); !a.Admitted() || !a.Found || a.Value != "1 s\n{}" || a.ReadErr != nil {
		t.Fatalf("admit with a read: %+v", a)
	}
	if a := b.admit(t, limits.AdmitRequest{Read: ev, Gen: "other"}); !a.Unknown || !a.Found || a.Value != "1 s\n{}" {
		t.Fatalf("refused, the read still answers: %+v", a)
	}
	if a := b.admit(t, limits.AdmitRequest{Read: b.ns.Event("gone")}); !a.Admitted() || a.Found || a.ReadErr != nil {
		t.Fatalf("admit reading a missing key: %+v", a)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, names := range rec.sent {
		if names[0] == "hello" || names[0] == "client" {
			continue // a new connection's handshake
		}
		if len(names) != 2 || names[0] != "get" || !strings.HasPrefix(names[1], "eval") {
			t.Errorf("a round trip of %v, want the read and the script together", names)
		}
	}
}
