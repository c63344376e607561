package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

var redisSrv *deploy.Redis

func TestMain(m *testing.M) { testkit.Main(m, &redisSrv) }

// bundle is one test's gates, namespace and client, with subscriber "s"
// (generation "g1").
type bundle struct {
	g    *limits.Gates
	rdb  *redis.Client
	ns   tasks.Keys
	k    limits.GateKeys // subscriber "s"
	pace limits.Pace
}

// setup registers subscriber "s" in a namespace of the test's own, with a
// wide pace (nothing binds) unless the test sets b.pace.
func setup(t *testing.T) *bundle {
	t.Parallel()
	return setupOn(t, redis.NewClient(&redis.Options{Addr: redisSrv.Addr}))
}

// setupOn is setup on client c (closed when the test ends).
func setupOn(t testing.TB, c *redis.Client) *bundle {
	t.Cleanup(func() { c.Close() })
	ns := tasks.Keys(testkit.Namespace("t"))
	b := &bundle{g: limits.NewGates(c), rdb: c, ns: ns, k: ns.Gates("s"),
		pace: limits.Pace{Limit: wide, MaxInFlight: 100, MaxWait: time.Second, Ramp: 10 * time.Second}}
	if err := c.HSet(context.Background(), b.k.Record, "gen", "g1").Err(); err != nil {
		t.Fatal(err)
	}
	return b
}

var wide = limits.Limit{Rate: 1000, Burst: 1000, Period: time.Second}

// book books event ev for "s" with b's pace (held: even while paused).
func (b *bundle) book(t testing.TB, ev string, edit ...func(*limits.Booking)) limits.Booked {
	t.Helper()
	bk := limits.Booking{Keys: b.k, EventID: ev, EventType: "t", Horizon: time.Hour, Dedup: time.Hour, MaxAttempts: 3, Held: true,
		Token: limits.NewToken(), Pace: b.pace}
	for _, e := range edit {
		e(&bk)
	}
	out, err := b.g.Book(context.Background(), nil, bk)
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// admit runs Admit for event ev as run token.
func (b *bundle) admit(t *testing.T, ev, token string, edit ...func(*limits.AdmitRequest)) limits.Admission {
	t.Helper()
	r := limits.AdmitRequest{EventID: ev, Token: token, SlotTTL: time.Minute, Pace: b.pace}
	for _, e := range edit {
		e(&r)
	}
	a, err := b.g.Admit(context.Background(), b.k, r)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// commit commits o (EventID, Token and Dedup filled in when unset).
func (b *bundle) commit(t *testing.T, ev, token string, o limits.Outcome) limits.Committed {
	t.Helper()
	o.EventID, o.Token = ev, token
	if o.Dedup == 0 {
		o.Dedup = time.Hour
	}
	if o.Breaker == (limits.BreakerPolicy{}) {
		o.Breaker = limits.BreakerPolicy{}.WithDefaults()
	}
	c, err := b.g.Commit(context.Background(), b.k, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// turn runs a dispatcher's turn for "s".
func (b *bundle) turn(t testing.TB) limits.TurnResult {
	t.Helper()
	r, err := b.g.Turn(context.Background(), b.k, b.pace, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// asksAnswered deletes the turn asked (gate ta) as a turn does first, for
// a test that looks at each step's own ask without running the turns
// between them (lua.go's asked).
func (b *bundle) asksAnswered() {
	b.rdb.HDel(context.Background(), b.k.Record, "ta")
}

// rec is event ev's delivery record's field f.
func (b *bundle) rec(t *testing.T, ev, f string) string {
	t.Helper()
	return b.rdb.HGet(context.Background(), b.k.Deliveries+ev, f).Val()
}

// gate is the gate record's field f.
func (b *bundle) gate(f string) string {
	return b.rdb.HGet(context.Background(), b.k.Record, f).Val()
}

// score is member m's score in zset key (-1: absent).
func (b *bundle) score(key, m string) float64 {
	s, err := b.rdb.ZScore(context.Background(), key, m).Result()
	if err != nil {
		return -1
	}
	return s
}

// redisNow is Redis' clock, which every gate compares against.
func (b *bundle) redisNow(t *testing.T) time.Time {
	t.Helper()
	now, err := b.rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}
