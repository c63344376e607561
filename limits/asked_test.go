package limits_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hooklane/hooklane/limits"
)

// A script that parks a delivery asks a turn of the ready index only when
// no turn asked no later is still to come (lua.go's asked): one asked for
// an earlier or equal time stands for it until a turn runs, a later one
// does not, and an ask a second overdue (its ready write may have been
// lost) is asked again.
func TestABookingAsksATurnOnlyWhenNoneIsAskedByThen(t *testing.T) {
	b := setup(t)
	now := b.redisNow(t)
	at := func(d time.Duration) func(*limits.Booking) {
		return func(bk *limits.Booking) { bk.NotBefore = now.Add(d) }
	}
	asks := func(ev string, d time.Duration, want bool) {
		t.Helper()
		bd := b.book(t, ev, at(d))
		if bd.Where != limits.WhereLot || bd.Queued == want {
			t.Fatalf("%s due in %v: where %q, queued %v; want the lot, asking a turn: %v (ta %s)", ev, d, bd.Where, bd.Queued, want, b.gate("ta"))
		}
		if want && b.gate("ta") != ms(bd.Due) {
			t.Fatalf("%s asked a turn at %v, ta %s", ev, bd.Due, b.gate("ta"))
		}
	}
	asks("a", time.Hour, true)
	asks("b", 2*time.Hour, false)    // the turn at a's time hands it out too
	asks("c", 30*time.Minute, true)  // due before the turn asked
	asks("d", 30*time.Minute, false) // the same time
	b.turn(t)                        // answers the asks: the next books its own
	if b.gate("ta") != "" {
		t.Fatalf("ta %s after a turn; want none", b.gate("ta"))
	}
	asks("e", 3*time.Hour, true)
	b.rdb.HSet(context.Background(), b.k.Record, "ta", b.redisNow(t).Add(-1100*time.Millisecond).UnixMilli())
	asks("f", 4*time.Hour, true) // an ask a second overdue is not trusted
}

// A commit group and an Admit group ask the ready index for one turn for
// what they park, not one for each delivery; the others say the turn they
// need is asked (Asked: the worker wakes its dispatcher, writes nothing).
func TestAGroupAsksOneTurn(t *testing.T) {
	b, ctx := setup(t), context.Background()
	var os []limits.Outcome
	for _, ev := range []string{"f1", "f2", "f3"} {
		os = append(os, limits.Outcome{EventID: ev, Token: b.taken(t, ev), Kind: limits.OutcomeFailed, Backoff: 30 * time.Second,
			Dedup: time.Hour, Breaker: limits.BreakerPolicy{}.WithDefaults(), Counters: map[string]int64{"failed": 1}})
	}
	b.asksAnswered()
	cs, err := b.g.CommitGroup(ctx, b.k, os)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if c.Notify.IsZero() || c.Asked != (i > 0) || b.gate("ta") != ms(cs[0].Notify) {
			t.Fatalf("commit %d: %+v (ta %s); want a turn at its backoff's end, asked of the ready index by the first only", i, c, b.gate("ta"))
		}
	}
	// sent again (its reply lost): the same answers
	if again, err := b.g.CommitGroup(ctx, b.k, os); err != nil || again[0] != cs[0] || again[1] != cs[1] {
		t.Fatalf("the group sent again: %+v, %v; want its first answers %+v", again, err, cs)
	}

	for _, ev := range []string{"c1", "c2"} {
		b.book(t, ev)
	}
	b.g.Cooldown(ctx, b.k, limits.RetryAfter{After: time.Minute}, time.Hour)
	b.asksAnswered()
	as, err := b.g.AdmitGroup(ctx, b.k, []limits.AdmitRequest{{EventID: "c1", Token: limits.NewToken(), SlotTTL: time.Minute, Pace: b.pace},
		{EventID: "c2", Token: limits.NewToken(), SlotTTL: time.Minute, Pace: b.pace}})
	if err != nil {
		t.Fatal(err)
	}
	if !as[0].Parked || !as[1].Parked || as[0].Notify.IsZero() || as[0].NotifyAsked || !as[1].Notify.Equal(as[0].Notify) || !as[1].NotifyAsked {
		t.Fatalf("admits %+v, %+v; want both parked cooling, a turn at its end, asked of the ready index by the first only", as[0], as[1])
	}
}

// ms is t as the gate record writes a time: Unix ms.
func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
