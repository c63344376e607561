package limits_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// taken books ev and admits it as a new run: its token.
func (b *bundle) taken(t *testing.T, ev string) string {
	t.Helper()
	b.book(t, ev)
	tok := limits.NewToken()
	if a := b.admit(t, ev, tok); !a.Admitted {
		t.Fatalf("%s: %+v", ev, a)
	}
	return tok
}

// Each outcome moves the delivery where it belongs, in the one step that
// also releases the run's slot: delivered ends it (and clears a stale
// dead letter of it, not a replayed one); a counted failure parks it for
// its backoff; a 429, a failed probe and an interrupted request spend no
// attempt.
func TestCommitMovesTheDelivery(t *testing.T) {
	b, ctx := setup(t), context.Background()
	at := time.Now()
	attempt := func(code int) (string, string) {
		return tasks.AttemptField(at), string(tasks.EncodeAttempt(tasks.Attempt{At: at, Status: code}))
	}

	tok := b.taken(t, "ok")
	// Stale: the release before wrote it, then the delivery went on (Adopt
	// marks its deliveries as maybe having one: le).
	b.rdb.Set(ctx, b.k.Dead+"ok", `{"task_id":"s:ok"}`, 0)
	b.rdb.HSet(ctx, b.k.Deliveries+"ok", "le", 1)
	f, a := attempt(200)
	c := b.commit(t, "ok", tok, limits.Outcome{Kind: limits.OutcomeDelivered, AttemptField: f, Attempt: a, DeliveredAt: at, Answered: true,
		TaskID: "s:ok", Counters: map[string]int64{"delivered": 1}})
	if c.Superseded || !c.ClearedStale || b.rec(t, "ok", "s") != "delivered" || b.rec(t, "ok", "tk") != "" ||
		b.rec(t, "ok", f) == "" || b.score(b.k.InFlight, tok) != -1 || b.rdb.Exists(ctx, b.k.Dead+"ok").Val() != 0 {
		t.Fatalf("delivered: %+v, record %v", c, b.rdb.HGetAll(ctx, b.k.Deliveries+"ok").Val())
	}
	if ttl := b.rdb.PTTL(ctx, b.k.Deliveries+"ok").Val(); ttl < 59*time.Minute {
		t.Fatalf("delivered record's ttl %v; want at least the 1h dedup window", ttl)
	}

	tok = b.taken(t, "fail")
	now := b.redisNow(t)
	b.commit(t, "fail", tok, limits.Outcome{Kind: limits.OutcomeFailed, Backoff: 30 * time.Second, EndpointFailure: true})
	if b.rec(t, "fail", "s") != "retrying" || b.rec(t, "fail", "c") != "1" || b.score(b.k.Lot, "fail") < float64(now.Add(30*time.Second).UnixMilli()) ||
		b.score(b.k.Exp, "fail") < 0 {
		t.Fatalf("failed: record %v, lot %v", b.rdb.HGetAll(ctx, b.k.Deliveries+"fail").Val(), b.score(b.k.Lot, "fail"))
	}

	until, _, _ := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
	tok2 := b.book(t, "throttled")
	_ = tok2
	b.rdb.Del(ctx, b.k.Cooldown)
	tok = limits.NewToken()
	b.admit(t, "throttled", tok)
	b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
	c = b.commit(t, "throttled", tok, limits.Outcome{Kind: limits.OutcomeThrottled, Answered: true})
	if b.rec(t, "throttled", "s") != "cooling" || b.rec(t, "throttled", "c") != "0" || b.score(b.k.Lot, "throttled") < float64(until.UnixMilli()) ||
		c.Notify.Before(until) {
		t.Fatalf("throttled: record %v, %+v; want cooling, no attempt spent, parked until the cooldown", b.rdb.HGetAll(ctx, b.k.Deliveries+"throttled").Val(), c)
	}
	b.rdb.Del(ctx, b.k.Cooldown)

	tok = b.taken(t, "cut")
	f, a = attempt(0)
	b.commit(t, "cut", tok, limits.Outcome{Kind: limits.OutcomeInterrupted, AttemptField: f, Attempt: a})
	if b.rec(t, "cut", "s") != "pending" || b.rec(t, "cut", "c") != "0" || b.rec(t, "cut", "tk") != "" || b.rec(t, "cut", f) == "" {
		t.Fatalf("interrupted: record %v; want pending, no attempt spent, the attempt recorded", b.rdb.HGetAll(ctx, b.k.Deliveries+"cut").Val())
	}
	if a := b.admit(t, "cut", limits.NewToken()); !a.Admitted {
		t.Fatalf("the task asynq put back: %+v; want it taken", a)
	}
}

// A 429 whose cooldown the run could not write (Gates.Cooldown failed)
// still parks its delivery until the run's deadline, not at the empty
// cooldown key's "now", and the commit writes the cooldown, so that the
// subscriber's other deliveries wait for it too; one written already is
// never shortened.
func TestCommitThrottledKeepsTheRunsDeadline(t *testing.T) {
	b, ctx := setup(t), context.Background()
	tok := b.taken(t, "lost")
	deadline := time.Now().Add(time.Minute).Add(300 * time.Microsecond) // in ms, rounded up
	c := b.commit(t, "lost", tok, limits.Outcome{Kind: limits.OutcomeThrottled, Answered: true, CoolUntil: deadline, CoolLost: true})
	want := float64(deadline.Truncate(time.Millisecond).Add(time.Millisecond).UnixMilli())
	if got := b.score(b.k.Lot, "lost"); got != want || c.Notify.UnixMilli() != int64(want) {
		t.Fatalf("parked at %.0f, notify %v; want the run's deadline %.0f", got, c.Notify, want)
	}
	if got := limits.ParseCooldown(b.rdb.Get(ctx, b.k.Cooldown).Val()); got.UnixMilli() != int64(want) {
		t.Fatalf("cooldown %v; want the run's deadline %v written", got, deadline)
	}
	if ttl := b.rdb.PTTL(ctx, b.k.Cooldown).Val(); ttl < time.Minute+50*time.Second || ttl > 2*time.Minute+time.Second {
		t.Fatalf("cooldown key lives %v; want until its end + 1 min", ttl)
	}

	// A later cooldown in force is kept: the delivery waits for it.
	b.rdb.Del(ctx, b.k.Cooldown)
	tok = b.taken(t, "kept")
	later, _, _ := b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: 2 * time.Minute}, time.Hour)
	b.commit(t, "kept", tok, limits.Outcome{Kind: limits.OutcomeThrottled, Answered: true, CoolUntil: deadline, CoolLost: true})
	if got := b.score(b.k.Lot, "kept"); got != float64(later.UnixMilli()) || b.rdb.Get(ctx, b.k.Cooldown).Val() != strconv.FormatInt(later.UnixMilli(), 10) {
		t.Fatalf("parked at %.0f, cooldown %s; want the later cooldown %d kept", got, b.rdb.Get(ctx, b.k.Cooldown).Val(), later.UnixMilli())
	}
}

// A dead letter is committed with the delivery's dead state: the ledger
// entry carries every attempt the record kept, the subscriber's index and
// report batch list it, and it leaves the schedule.
func TestCommitDeadLetterCarriesTheRecordsAttempts(t *testing.T) {
	b, ctx := setup(t), context.Background()
	tok := b.taken(t, "e1")
	first := time.Now().Add(-time.Minute)
	b.commit(t, "e1", tok, limits.Outcome{Kind: limits.OutcomeFailed, Backoff: 0, AttemptField: tasks.AttemptField(first),
		Attempt: string(tasks.EncodeAttempt(tasks.Attempt{At: first, Status: 500}))})
	tok = limits.NewToken()
	if a := b.admit(t, "e1", tok); !a.Admitted || a.Spent != 1 {
		t.Fatalf("second attempt: %+v", a)
	}
	second := time.Now()
	e := tasks.DeadLetter{TaskID: "s:e1", SubscriberID: "s", Reason: "attempts", Error: "attempt 2 of 2", DeadAt: second.UTC()}
	body := []byte(`{"id":"e1","type":"t","timestamp":"2026-12-01T09:00:00Z","data":{"k": 1}}`)
	b.commit(t, "e1", tok, limits.Outcome{Kind: limits.OutcomeDead, AttemptField: tasks.AttemptField(second),
		Attempt: string(tasks.EncodeAttempt(tasks.Attempt{At: second, Status: 503, AttemptsSpent: 1})), TaskID: "s:e1",
		DeadEntry: tasks.DeadLetterPrefix(e, body), ReportSample: "e1 attempts"})
	v, err := b.rdb.Get(ctx, b.k.Dead+"e1").Result()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := tasks.ParseLedger(v, nil)
	if !ok || len(got.Attempts) != 2 || got.Attempts[0].Status != 500 || got.Attempts[1].Status != 503 || got.Event == nil ||
		string(got.Event.Data) != `{"k": 1}` || got.Reason != "attempts" {
		t.Fatalf("ledger entry %s → %+v", v, got)
	}
	if b.rec(t, "e1", "s") != "dead" || b.score(b.k.DeadIndex, "s:e1") < 0 || b.rdb.HGet(ctx, b.k.DeadBatch, "n").Val() != "1" ||
		b.score(b.k.Lot, "e1") != -1 || b.score(b.k.Exp, "e1") != -1 {
		t.Fatal("the dead letter is not listed, or the delivery is still scheduled")
	}
}

// Only the run that owns the delivery commits its outcome; a run taken
// over (its worker thought dead) only releases its slot.
func TestCommitBelongsToTheOwner(t *testing.T) {
	b, ctx := setup(t), context.Background()
	old := b.taken(t, "e1")
	b.rdb.ZAdd(ctx, b.k.InFlight, redis.Z{Score: 1, Member: old})
	now := limits.NewToken()
	if a := b.admit(t, "e1", now); !a.TookOver {
		t.Fatalf("%+v", a)
	}
	if c := b.commit(t, "e1", old, limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true}); !c.Superseded {
		t.Fatalf("the old run's outcome: %+v; want superseded", c)
	}
	if b.rec(t, "e1", "s") != "in_flight" || b.rec(t, "e1", "tk") != now {
		t.Fatal("the old run's outcome was written over the new run's delivery")
	}
}

// resend is a hook that sends every call of a script it is told to twice,
// and answers the second reply: what a client retrying after a lost reply
// does (go-redis' MaxRetries, a batch sent again).
type resend struct{ on atomic.Bool }

func (h *resend) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *resend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && strings.HasPrefix(cmd.Name(), "eval") {
			_ = next(ctx, cmd) // the reply is lost
		}
		return next(ctx, cmd)
	}
}
func (h *resend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			_ = next(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// Every write that may run twice leaves the state of running once: a
// commit sent again (its reply lost) writes its attempt once, spends the
// attempt once, counts once, counts the breaker's failure once (its gap
// grows 1.5×, not 1.5²), answers what it answered the first time, and
// cannot move a delivered record back.
func TestCommitSentTwiceIsAppliedOnce(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	h := &resend{}
	c.AddHook(h)
	b := setupOn(t, c)
	ctx := context.Background()
	pol := limits.BreakerPolicy{Failures: 2}.WithDefaults()

	tok := b.taken(t, "e1")
	h.on.Store(true)
	at := time.Now()
	got := b.commit(t, "e1", tok, limits.Outcome{Kind: limits.OutcomeFailed, Backoff: time.Second, EndpointFailure: true, Breaker: pol,
		AttemptField: tasks.AttemptField(at), Attempt: string(tasks.EncodeAttempt(tasks.Attempt{At: at, Error: "reset"})),
		Counters: map[string]int64{"failed": 1, "http:error": 1}})
	h.on.Store(false)
	if b.rec(t, "e1", "c") != "1" || b.rec(t, "e1", "n") != "1" || b.gate("b_fails") != "1" || b.rdb.HGet(ctx, b.k.Stats, "failed").Val() != "1" {
		t.Fatalf("failure sent twice: c %s, n %s, breaker failures %s, counted %s; want each once",
			b.rec(t, "e1", "c"), b.rec(t, "e1", "n"), b.gate("b_fails"), b.rdb.HGet(ctx, b.k.Stats, "failed").Val())
	}
	if got.Superseded {
		t.Fatalf("the second send answered %+v; want the first's answer", got)
	}

	// A failure that opens the breaker, and a failed probe, each sent twice.
	tok = b.taken(t, "e2")
	h.on.Store(true)
	if got := b.commit(t, "e2", tok, limits.Outcome{Kind: limits.OutcomeFailed, Backoff: time.Second, EndpointFailure: true, Breaker: pol}); got.Change != limits.BreakerOpened {
		t.Fatalf("the failure that opens it, sent twice: %+v; want opened reported", got)
	}
	h.on.Store(false)
	b.rdb.HSet(ctx, b.k.Record, "b_next", 0, "b_pe", "e3")
	b.book(t, "e3")
	tok = limits.NewToken()
	if a := b.admit(t, "e3", tok); !a.Admitted || !a.Probe {
		t.Fatalf("probe: %+v", a)
	}
	h.on.Store(true)
	b.commit(t, "e3", tok, limits.Outcome{Kind: limits.OutcomeProbeFailed, EndpointFailure: true, Probe: true, Breaker: pol})
	h.on.Store(false)
	if gap := b.gate("b_gap"); gap != "1500" {
		t.Fatalf("gap after a failed probe sent twice: %s ms; want 1500 (1s × 1.5, once)", gap)
	}
	if b.rec(t, "e3", "c") != "0" {
		t.Fatalf("the failed probe spent %s attempts; want none", b.rec(t, "e3", "c"))
	}

	// Delivered, then a late, repeated failure of the same run: nothing moves back.
	b.rdb.HDel(ctx, b.k.Record, "b_open", "b_next", "b_gap", "b_pe", "b_probe")
	tok = b.taken(t, "e4")
	b.commit(t, "e4", tok, limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true})
	h.on.Store(true)
	if got := b.commit(t, "e4", tok, limits.Outcome{Kind: limits.OutcomeFailed, Backoff: time.Second}); got.Superseded {
		t.Log("answered superseded: fine")
	}
	h.on.Store(false)
	if b.rec(t, "e4", "s") != "delivered" || b.score(b.k.Lot, "e4") != -1 {
		t.Fatalf("a delivered record moved back to %s", b.rec(t, "e4", "s"))
	}
}

// The breaker: failures in a row open it, an answer that is not one ends
// the streak, a failed probe stretches the gap 1.5× up to its cap, any
// answer closes it into the slow start, and failing for DisableAfter
// disables the subscriber.
func TestCommitRunsTheBreaker(t *testing.T) {
	b, ctx := setup(t), context.Background()
	pol := limits.BreakerPolicy{Failures: 3, ProbeGap: time.Second, MaxProbeGap: 2 * time.Second, DisableAfter: time.Hour}.WithDefaults()
	fail := func(ev string, probe bool) limits.Committed {
		tok := b.taken(t, ev)
		kind := limits.OutcomeFailed
		if probe {
			kind = limits.OutcomeProbeFailed
		}
		return b.commit(t, ev, tok, limits.Outcome{Kind: kind, Backoff: time.Second, EndpointFailure: true, Probe: probe, Breaker: pol})
	}
	fail("a", false)
	fail("b", false)
	tok := b.taken(t, "c")
	b.commit(t, "c", tok, limits.Outcome{Kind: limits.OutcomeFailed, Backoff: time.Second, Answered: true, Breaker: pol})
	if b.gate("b_fails") != "" {
		t.Fatalf("a 4xx did not end the streak: %s failures", b.gate("b_fails"))
	}
	for _, ev := range []string{"d", "e"} {
		fail(ev, false)
	}
	if c := fail("f", false); c.Change != limits.BreakerOpened || b.gate("b_open") == "" {
		t.Fatalf("third failure in a row: %+v; want opened", c)
	}
	for i, want := range []string{"1500", "2000", "2000"} {
		b.rdb.HSet(ctx, b.k.Record, "b_next", 0, "b_pe", "p"+strconv.Itoa(i))
		if c := fail("p"+strconv.Itoa(i), true); c.Notify.IsZero() || b.gate("b_gap") != want {
			t.Fatalf("failed probe %d: gap %s, want %s (%+v)", i, b.gate("b_gap"), want, c)
		}
	}
	b.rdb.HSet(ctx, b.k.Record, "b_next", 0, "b_pe", "ok")
	tok = b.taken(t, "ok")
	if c := b.commit(t, "ok", tok, limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true, Probe: true, Breaker: pol}); c.Change != limits.BreakerClosed || c.Notify.IsZero() || b.gate("b_ramp") == "" || b.gate("b_open") != "" {
		t.Fatalf("the probe answered: %+v; want closed, slow start, a turn now", c)
	}
	// Failing since more than DisableAfter ago (the slow start long over):
	// the next failure disables.
	b.rdb.HDel(ctx, b.k.Record, "b_ramp")
	b.rdb.HSet(ctx, b.k.Record, "b_since", time.Now().Add(-2*time.Hour).UnixMilli(), "b_fails", 1)
	if c := fail("z", false); c.Change != limits.BreakerDisabled || b.gate("paused") != tasks.PauseFailing {
		t.Fatalf("failing for 2h: %+v, paused %q; want disabled", c, b.gate("paused"))
	}
	// A failed probe that disables gives the probe role back too: resumed,
	// the subscriber probes at the next gap, not once the probe's lease
	// has lapsed.
	b.rdb.HDel(ctx, b.k.Record, "paused", "paused_at")
	b.rdb.HSet(ctx, b.k.Record, "b_open", time.Now().UnixMilli(), "b_next", 0, "b_pe", "y",
		"b_probe", time.Now().Add(time.Minute).UnixMilli())
	if c := fail("y", true); c.Change != limits.BreakerDisabled || b.gate("b_probe") != "" || b.gate("b_pe") != "" {
		t.Fatalf("a failed probe that disables: %+v, probe lease %q of %q; want disabled, the role given back", c, b.gate("b_probe"), b.gate("b_pe"))
	}
}

// The effective rate's arithmetic, run by the real scripts with their
// stored times moved back as time would (limit 10/s, burst 10): a 429
// drops the rate to 90% of what the destination accepted over the last
// 10 s (2xx a second, over a second at least: the burst's span at the
// limit; the last cooldown's time left out), at most the rate it had, or
// halves it when it accepted none; the answers of the same burst measure
// again from the rate before it; never below a tenth of the limit; 2xx
// give 1% of the limit a minute back for the time between them (a second
// at most), and time alone gives nothing.
func TestAdaptiveArithmetic(t *testing.T) {
	b, ctx := setup(t), context.Background()
	l := limits.Limit{Rate: 10, Burst: 10, Period: time.Second}
	n := 0
	var cool int64 // a cooldown to end then, written as the worker does before its commit
	answer := func(o limits.Outcome) {
		n++
		ev := fmt.Sprintf("e%d", n)
		o.Answered, o.Limit, o.AdaptReason = true, l, "429"
		tok := b.taken(t, ev)
		if cool > 0 {
			b.rdb.Set(ctx, b.k.Cooldown, cool, time.Minute)
		}
		b.commit(t, ev, tok, o)
	}
	throttle := func() { answer(limits.Outcome{Kind: limits.OutcomeFailed, Backoff: time.Second, Throttled: true}) }
	deliver := func() { answer(limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now()}) }
	share := func() float64 {
		f, err := strconv.ParseFloat(b.gate("a_f"), 64)
		if err != nil {
			return 1
		}
		return f
	}
	tol := 0.00002 // 1.2 s of climbing is 0.0002
	near := func(what string, want float64) {
		t.Helper()
		if f := share(); math.Abs(f-want) > tol {
			t.Fatalf("%s: a_f %v; want %.6f", what, f, want)
		}
	}
	within := func(what string, lo, hi float64) {
		t.Helper()
		if f := share(); f < lo-tol || f > hi+tol {
			t.Fatalf("%s: a_f %v; want %.6f to %.6f", what, f, lo, hi)
		}
	}
	back := func(d time.Duration, fields ...string) { // the fields' times d earlier
		for _, f := range fields {
			at, _ := strconv.ParseInt(b.gate(f), 10, 64)
			b.rdb.HSet(ctx, b.k.Record, f, at-d.Milliseconds())
		}
	}

	throttle()
	near("a 429 with nothing accepted in the window", 0.5)
	if b.gate("a_why") != "429" {
		t.Fatalf("a_why %q; want the reason", b.gate("a_why"))
	}
	throttle()
	near("a second 429 of the same burst", 0.5)

	b.rdb.HDel(ctx, b.k.Record, "a_f", "a_at", "a_pre", "a_up", "a_why")
	deliver()
	deliver()
	if b.gate("a_f") != "" || b.gate("a_n") != "2" {
		t.Fatalf("2xx without a lesson: a_f %q, a_n %q; want no lesson, 2 counted", b.gate("a_f"), b.gate("a_n"))
	}
	throttle()
	near("a 429 after 2 accepted (2/s of 10/s)", 0.9*0.2)
	deliver() // the burst's third answer: 3 accepted
	near("a 2xx of the same burst", 0.9*0.3)
	throttle()
	near("another 429 of the same burst", 0.9*0.3)

	back(time.Second, "a_at")
	back(time.Minute, "a_up")
	deliver()
	near("a 2xx a minute after the last", 0.27+0.01/60)
	before := limits.ReadEffective(b.rdb.HGetAll(ctx, b.k.Record).Val(), l, 0, b.redisNow(t))
	back(10*time.Minute, "a_up")
	if e := limits.ReadEffective(b.rdb.HGetAll(ctx, b.k.Record).Val(), l, 0, b.redisNow(t)); e.Rate != before.Rate {
		t.Fatalf("10 minutes without a 2xx: %v/s; want %v/s still", e.Rate, before.Rate)
	}
	deliver()
	deliver()
	// the first a second's worth (at most), the next what the few ms
	// since the first earned
	near("2 more 2xx", 0.27+0.01/60*2)
	// 6 accepted in the window (0.6 of the limit): at most the rate it had.
	throttle()
	near("a 429 after 6 accepted, at 0.2703 of the limit", 0.9*(0.27+0.01/60*2))

	// The window slides: 20 accepted in the 15 s before the current one
	// (1.33 a second). Its start is set 15 s before Redis' clock, and the
	// clock read again after the 2xx that closes it: the window lasted 15 s
	// and at most that slack (a loaded machine's ms: 136 ms once under
	// make test, when the start was moved back from where it stood).
	// The rate had is 2/s here (0.2): what was accepted is over half of it.
	b.rdb.HDel(ctx, b.k.Record, "a_at", "a_pre", "a_up", "a_why")
	b.rdb.HSet(ctx, b.k.Record, "a_n", 20, "a_f", "0.2")
	t0 := b.redisNow(t)
	b.rdb.HSet(ctx, b.k.Record, "a_w", t0.Add(-15*time.Second).UnixMilli())
	deliver()
	slack := b.redisNow(t).Sub(t0) + time.Millisecond // (the clock's ms rounding)
	lo, hi := 20/(15+slack.Seconds()), 20/15.0
	if p, _ := strconv.ParseFloat(b.gate("a_p"), 64); p < lo-0.0001 || p > hi+0.0001 || b.gate("a_n") != "1" {
		t.Fatalf("a new window: a_p %q, a_n %q; want 20 in 15 s to 15 s + %v (%.4f to %.4f), 1", b.gate("a_p"), b.gate("a_n"), slack, lo, hi)
	}
	throttle()
	// The ms since the window began take their share of 13.3 off: 0.0005
	// is ~40 ms between the two scripts, which a loaded machine (the light
	// packages of make test side by side) overran (0.12845 for 0.128997);
	// 0.003 is ~250 ms, still far from any other rule's answer (halved:
	// 0.5 of the rate before; 5% off: 0.95 of it).
	tol = 0.003
	near("a 429 after 13.3 + 1 in the last 10 s, at 2/s", 0.9*1.4333/10)
	tol = 0.00002
	// The same window at the whole limit (10/s): 1.43 accepted a second,
	// spread over it, is how much was sent, not what the receiver takes:
	// halved (90% of it, the rule before, was 0.129 of the limit).
	b.rdb.HSet(ctx, b.k.Record, "a_f", "1")
	back(2*time.Second, "a_at")
	throttle()
	near("a 429 after 2xx spread over the window at 1.43/s of 10/s", 0.5)

	// A window older than twice its length says nothing: halved.
	b.rdb.HSet(ctx, b.k.Record, "a_f", "0.8")
	back(time.Second, "a_at")
	back(25*time.Second, "a_w")
	throttle()
	near("a 429 with the window 25 s old", 0.4)
	b.rdb.HSet(ctx, b.k.Record, "a_f", "0.15")
	back(time.Second, "a_at")
	throttle()
	near("at the floor", 0.1)
	if e := limits.ReadEffective(b.rdb.HGetAll(ctx, b.k.Record).Val(), l, 0, b.redisNow(t)); math.Abs(e.Rate-1) > 0.001 || e.Reason != "429" {
		t.Fatalf("effective rate at the floor: %v/s (%q); want 1/s of 10, with the reason", e.Rate, e.Reason)
	}

	// A cooldown is no time to accept anything: 10 accepted in a window of
	// 5 s, 3 of them cooling, is 5/s. A decrease keeps the end of the
	// cooldown it ran into, and the time the one before took of the
	// window.
	now := b.redisNow(t).UnixMilli()
	// (At 6/s: 5/s is over half of it, and 2/s, the window counted whole,
	// would lower it to half, 0.3.)
	b.rdb.HSet(ctx, b.k.Record, "a_f", "0.6", "a_pre", "0.6", "a_at", now-4000, "a_cu", now-1000, "a_w", now-5000, "a_n", 10, "a_cw", 0)
	b.rdb.HDel(ctx, b.k.Record, "a_p")
	cool = now + 3000
	throttle()
	// The ms the calls take since now lengthen the window and may shorten
	// the cooling counted in it (each by at most the time elapsed, read
	// after the script, plus a ms of rounding each): the share lies between
	// what the window measures at its slowest and at now itself.
	slow := float64(b.redisNow(t).UnixMilli() - now)
	within("a 429 after 10 accepted in 5 s, 3 s of them cooling", 0.9*10/((2000+2*slow+2)/1000)/10, 0.9*0.5)
	if cu, cw := b.gate("a_cu"), b.gate("a_cw"); cu != strconv.FormatInt(now+3000, 10) || cw != "3000" {
		t.Fatalf("a_cu %q, a_cw %q; want the cooldown's end %d, the 3000 ms of the one before", cu, cw, now+3000)
	}
	cool = 0
	b.rdb.Del(ctx, b.k.Cooldown)
	// 4 s later, that cooldown over: 10 accepted in 9 s, 6 of them cooling.
	back(4*time.Second, "a_at", "a_cu", "a_w")
	throttle()
	slow = float64(b.redisNow(t).UnixMilli() - now)
	within("a 429 after 10 accepted in 9 s, 6 s of them cooling", 0.9*10/((3000+2*slow+2)/1000)/10, 0.9*(10.0/3)/10)
	if cw, _ := strconv.ParseFloat(b.gate("a_cw"), 64); cw < 5950 || cw > 6000 {
		t.Fatalf("a_cw %v; want both cooldowns' 6000 ms (less the ms the calls took)", cw)
	}

	b.rdb.HSet(ctx, b.k.Record, "a_f", "0.9999")
	back(time.Second, "a_at", "a_up")
	deliver()
	if b.gate("a_f") != "" || b.gate("a_at") != "" || b.gate("a_cu") != "" {
		t.Fatalf("the limit reached: a_f %q, a_at %q still kept", b.gate("a_f"), b.gate("a_at"))
	}
}

// A group of outcomes (a batch's) is committed as each alone would be,
// the subscriber's counters of them all added once; the group sent again
// (a lost reply) changes nothing and counts nothing twice.
func TestCommitGroupCommitsEachOutcome(t *testing.T) {
	b, ctx := setup(t), context.Background()
	at := time.Now()
	pol := limits.BreakerPolicy{}.WithDefaults()
	var os []limits.Outcome
	for _, ev := range []string{"g1", "g2", "g3"} {
		o := limits.Outcome{EventID: ev, Token: b.taken(t, ev), Kind: limits.OutcomeDelivered, DeliveredAt: at, Answered: true, Dedup: time.Hour,
			Breaker: pol, Counters: map[string]int64{"delivered": 1, "http:200": 1}}
		if ev == "g3" {
			o.Kind, o.Backoff, o.DeliveredAt, o.Counters = limits.OutcomeFailed, 30*time.Second, time.Time{}, map[string]int64{"failed": 1, "http:500": 1}
		}
		os = append(os, o)
	}
	for try := range 2 {
		cs, err := b.g.CommitGroup(ctx, b.k, os)
		if err != nil || len(cs) != 3 {
			t.Fatalf("try %d: %v, %v", try, cs, err)
		}
		for i, c := range cs {
			if c.Superseded {
				t.Fatalf("try %d: %s superseded", try, os[i].EventID)
			}
		}
		st := b.rdb.HGetAll(ctx, b.k.Stats).Val()
		if st["delivered"] != "2" || st["http:200"] != "2" || st["failed"] != "1" || st["http:500"] != "1" {
			t.Fatalf("try %d: counters %v; want delivered 2, http:200 2, failed 1, http:500 1", try, st)
		}
	}
	if b.rec(t, "g1", "s") != "delivered" || b.rec(t, "g2", "s") != "delivered" || b.rec(t, "g3", "s") != "retrying" ||
		b.score(b.k.Lot, "g3") < 0 || b.rdb.ZCard(ctx, b.k.InFlight).Val() != 0 || b.rdb.ZCard(ctx, b.k.Runs).Val() != 0 {
		t.Fatalf("records %s %s %s, lot g3 %v, %d slots, %d runs; want delivered, delivered, retrying (parked), none held",
			b.rec(t, "g1", "s"), b.rec(t, "g2", "s"), b.rec(t, "g3", "s"), b.score(b.k.Lot, "g3"), b.rdb.ZCard(ctx, b.k.InFlight).Val(),
			b.rdb.ZCard(ctx, b.k.Runs).Val())
	}
}

// A group counts what it commits now, and nothing twice: its counters go
// once as the group's sum when every outcome is committed by it, else
// each one's that is (an outcome committed before, its reply lost, or
// one superseded counts nothing again).
func TestCommitGroupCountsWhatItCommits(t *testing.T) {
	b, ctx := setup(t), context.Background()
	delivered := func(ev, tok string) limits.Outcome {
		return limits.Outcome{EventID: ev, Token: tok, Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true,
			Dedup: time.Hour, Breaker: limits.BreakerPolicy{}.WithDefaults(), Counters: map[string]int64{"delivered": 1, "http:200": 1}}
	}
	t1, t2, t3 := b.taken(t, "c1"), b.taken(t, "c2"), b.taken(t, "c3")
	b.commit(t, "c1", t1, delivered("c1", t1)) // committed before: the group's is its reply lost
	cs, err := b.g.CommitGroup(ctx, b.k, []limits.Outcome{delivered("c1", t1), delivered("c2", t2), delivered("c3", "another run")})
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Superseded || cs[1].Superseded || !cs[2].Superseded {
		t.Fatalf("replies %+v; want c1 again (as ok), c2 ok, c3 superseded", cs)
	}
	if st := b.rdb.HGetAll(ctx, b.k.Stats).Val(); st["delivered"] != "2" || st["http:200"] != "2" {
		t.Fatalf("counters %v; want delivered 2, http:200 2 (c1 and c2 once each)", st)
	}
	b.commit(t, "c3", t3, delivered("c3", t3))
	if st := b.rdb.HGetAll(ctx, b.k.Stats).Val(); st["delivered"] != "3" {
		t.Fatalf("counters %v; want delivered 3", st)
	}
}

// A sub-millisecond answer records a latency of 1ms: an endpoint on the
// same host is paced as the fast one it is, not as one whose latency is
// unknown (taken as 1s), which a whole-millisecond 0 left it.
func TestCommitRecordsASubMillisecondLatency(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	o := limits.Outcome{EventID: "f", Token: b.taken(t, "f"), Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true,
		Dedup: time.Hour, Breaker: limits.BreakerPolicy{}.WithDefaults(), Limit: wide, Latency: 300 * time.Microsecond,
		Counters: map[string]int64{"delivered": 1}}
	if _, err := b.g.Commit(ctx, b.k, o); err != nil {
		t.Fatal(err)
	}
	if lt := b.rdb.HGet(ctx, b.k.Record, "lt").Val(); lt != "1" {
		t.Fatalf("lt %q after a 300µs answer; want 1", lt)
	}
}

// A group writes the gate record as its outcomes one by one would: the
// 2xx counted in the adaptive window (a_n, added once at the group's end),
// the latency's moving average (lt, written once), and a failure between
// them that writes the breaker (b_fails, which the 2xx after it deletes:
// the group reads the record again after a write, with what it has not
// written yet).
func TestCommitGroupWritesTheGateAsOneByOne(t *testing.T) {
	ctx := context.Background()
	pol := limits.BreakerPolicy{}.WithDefaults()
	outcomes := func(b *bundle) []limits.Outcome {
		var os []limits.Outcome
		for i, lat := range []int{100, 300, 50, 200, 400} {
			ev := fmt.Sprintf("w%d", i)
			o := limits.Outcome{EventID: ev, Token: b.taken(t, ev), Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true,
				Dedup: time.Hour, Breaker: pol, Limit: wide, Latency: time.Duration(lat) * time.Millisecond, Counters: map[string]int64{"delivered": 1}}
			if i == 2 {
				o.Kind, o.Backoff, o.DeliveredAt, o.Answered, o.EndpointFailure = limits.OutcomeFailed, 30*time.Second, time.Time{}, false, true
			}
			os = append(os, o)
		}
		return os
	}
	fields := func(b *bundle) []any {
		return b.rdb.HMGet(ctx, b.k.Record, "a_n", "lt", "b_fails").Val()
	}
	group, alone := setup(t), setupOn(t, redis.NewClient(&redis.Options{Addr: redisSrv.Addr}))
	if _, err := group.g.CommitGroup(ctx, group.k, outcomes(group)); err != nil {
		t.Fatal(err)
	}
	for _, o := range outcomes(alone) {
		if _, err := alone.g.Commit(ctx, alone.k, o); err != nil {
			t.Fatal(err)
		}
	}
	// lt: 100, then 0.8 × the last + 0.2 × the new: 140, 122, 137.6 → 138, 190.4 → 190
	g, a := fmt.Sprint(fields(group)), fmt.Sprint(fields(alone))
	if g != a || a != "[4 190 <nil>]" {
		t.Fatalf("a_n, lt, b_fails: %s as a group, %s one by one; want [4 190 <nil>] both", g, a)
	}
}

// Requirement 4 of issue 33: a group of outcomes (a batch's) writes the
// subscriber's bookkeeping once, not once per delivery: its counters in
// one HSET (after one HMGET: a single one is an HINCRBY), the adaptive
// window's 2xx count and the latency in one HSET, its releases of slots,
// runs and fresh-lane places one ZREM each; each record is still written
// on its own (an HSET each, and the latency's once). Counted by Redis'
// commandstats on a server of its own, 16 delivered outcomes as a group
// and the same one by one.
func TestCommitGroupWritesTheBookkeepingOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	calls := func(group bool) map[string]int64 {
		b := setupOn(t, redis.NewClient(&redis.Options{Addr: srv.Addr}))
		var os []limits.Outcome
		for i := range 16 {
			ev := fmt.Sprintf("k%02d", i)
			os = append(os, limits.Outcome{EventID: ev, Token: b.taken(t, ev), Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(),
				Answered: true, Dedup: time.Hour, Breaker: limits.BreakerPolicy{}.WithDefaults(), Limit: wide,
				Latency: time.Duration(10+i) * time.Millisecond, Counters: map[string]int64{"delivered": 1, "http:200": 1}})
		}
		before := testkit.CommandCalls(t, b.rdb)
		if group {
			if _, err := b.g.CommitGroup(ctx, b.k, os); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, o := range os {
				if _, err := b.g.Commit(ctx, b.k, o); err != nil {
					t.Fatal(err)
				}
			}
		}
		after := testkit.CommandCalls(t, b.rdb)
		// the counters add up either way (read and written, not incremented)
		if got := b.rdb.HMGet(ctx, b.k.Stats, "delivered", "http:200").Val(); fmt.Sprint(got) != "[16 16]" {
			t.Fatalf("counters delivered, http:200: %v; want [16 16]", got)
		}
		out := map[string]int64{}
		for _, c := range []string{"hincrby", "zrem", "hset"} {
			out[c] = after[c] - before[c]
		}
		return out
	}
	alone, group := calls(false), calls(true)
	// zrem: inflight, runs, fresh; hset: 16 records, the window (the first
	// 2xx opens it), a_n and lt, the counters (delivered, http:200)
	if group["hincrby"] != 0 || group["zrem"] != 3 || group["hset"] != 19 {
		t.Fatalf("a group of 16: %v; want hincrby 0, zrem 3, hset 19 (one by one: %v)", group, alone)
	}
	if alone["hincrby"] != 0 || alone["zrem"] != 16*3 || alone["hset"] != 16*3+1 {
		t.Fatalf("16 one by one: %v; want hincrby 0, zrem 48, hset 49 (the control)", alone)
	}
}

// A delivered outcome keeps the dead letter a replay has claimed, unmarked
// yet: the replay marks it replayed once its task is enqueued, and this
// delivery may be that task's, answered before the mark (the web test of
// replays lost the replayed entry so, now and then). Unclaimed, the same
// entry is stale and goes.
func TestCommitKeepsADeadLetterAReplayClaimed(t *testing.T) {
	b, ctx := setup(t), context.Background()
	for _, claimed := range []bool{true, false} {
		ev := fmt.Sprintf("e-%v", claimed)
		tok := b.taken(t, ev)
		b.rdb.Set(ctx, b.k.Dead+ev, `{"task_id":"s:`+ev+`"}`, 0)
		b.rdb.HSet(ctx, b.k.Deliveries+ev, "le", 1)
		if claimed {
			b.rdb.Set(ctx, b.k.Replaying+ev, "a-replay's-token", time.Minute)
		}
		c := b.commit(t, ev, tok, limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true, TaskID: "s:" + ev})
		if kept := b.rdb.Exists(ctx, b.k.Dead+ev).Val() == 1; kept != claimed || c.ClearedStale == claimed {
			t.Errorf("claimed %v: the entry kept %v, cleared %v; want kept only when claimed", claimed, kept, c.ClearedStale)
		}
	}
}
