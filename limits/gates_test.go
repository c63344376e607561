package limits

import (
	"context"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
)

var redisSrv *deploy.Redis

func TestMain(m *testing.M) {
	testkit.Main(m, &redisSrv)
}

// newGates returns gates in a namespace of the test's own, on a client it
// closes when the test ends.
func newGates(t *testing.T) *Gates {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { c.Close() })
	return NewGates(c, testkit.Namespace("t"))
}

func TestCooldownKeepsLater(t *testing.T) {
	g, ctx := newGates(t), context.Background()
	far := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	near := time.Now().Add(10 * time.Second).Truncate(time.Millisecond)
	if got, err := g.Cooldown(ctx, "s", far); err != nil || !got.Equal(far) {
		t.Fatalf("first cooldown = %v, %v; want %v", got, err, far)
	}
	if got, err := g.Cooldown(ctx, "s", near); err != nil || !got.Equal(far) {
		t.Fatalf("shorter cooldown = %v, %v; want the later %v kept", got, err, far)
	}
}

// admitter registers subscriber "s" in a fresh namespace and returns a
// function that runs Admit for it.
func admitter(t *testing.T, l Limit, maxInFlight int, ttl time.Duration) (*Gates, func() Admission) {
	g := newGates(t)
	if err := g.rdb.HSet(context.Background(), g.ns+":subscribers", "s", "{}").Err(); err != nil {
		t.Fatal(err)
	}
	return g, func() Admission {
		a, err := g.Admit(context.Background(), g.ns+":subscribers", g.ns+":paused", "s", l, maxInFlight, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}

var wide = Limit{Rate: 1000, Burst: 1000, Period: time.Second}

func TestAdmitCapsInFlightAndExpiresSlots(t *testing.T) {
	g, admit := admitter(t, wide, 2, 300*time.Millisecond)
	ctx := context.Background()
	first, second := admit(), admit()
	if !first.Admitted() || !second.Admitted() {
		t.Fatalf("first two: %+v %+v", first, second)
	}
	if a := admit(); !a.Busy {
		t.Fatalf("third with max 2: %+v, want busy", a)
	}
	if _, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { g.ReleaseIn(ctx, p, "s", first.Token); return nil }); err != nil {
		t.Fatal(err)
	}
	if a := admit(); !a.Admitted() {
		t.Fatalf("after release: %+v", a)
	}
	// second was never released, as by a crashed worker: it frees itself.
	testkit.Eventually(t, 5*time.Second, "the expired slot reclaimed", func() bool { return admit().Admitted() })
}

func TestAdmitRefusals(t *testing.T) {
	g, admit := admitter(t, wide, 5, time.Second)
	ctx := context.Background()
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	if _, err := g.Cooldown(ctx, "s", until); err != nil {
		t.Fatal(err)
	}
	if a := admit(); !a.CoolUntil.Equal(until) || a.Admitted() {
		t.Fatalf("during cooldown: %+v, want cooling until %v", a, until)
	}
	g.rdb.SAdd(ctx, g.ns+":paused", "s")
	if a := admit(); !a.Paused {
		t.Fatalf("paused: %+v", a)
	}
	g.rdb.HDel(ctx, g.ns+":subscribers", "s")
	if a := admit(); !a.Unknown {
		t.Fatalf("deleted: %+v", a)
	}
	if n, _ := g.rdb.ZCard(ctx, g.inflightKey("s")).Result(); n != 0 {
		t.Fatalf("refusals took %d slots", n)
	}
}

func TestAdmitRateLimit(t *testing.T) {
	_, admit := admitter(t, Limit{Rate: 10, Burst: 3, Period: time.Second}, 100, time.Minute)
	for i := range 3 {
		if a := admit(); !a.Admitted() {
			t.Fatalf("request %d: %+v", i, a)
		}
	}
	if a := admit(); a.Admitted() || a.Wait <= 0 || a.Wait > 100*time.Millisecond {
		t.Fatalf("4th request: %+v; want a wait in (0, 100ms]", a)
	}
}

// The rate step is redis_rate's GCRA on redis_rate's key: both see one limit.
func TestAdmitSharesLimitWithRedisRate(t *testing.T) {
	l := Limit{Rate: 5, Burst: 4, Period: time.Second}
	g, admit := admitter(t, l, 100, time.Minute)
	lim := redis_rate.NewLimiter(g.rdb)
	ctx := context.Background()
	for i := range 2 {
		if a := admit(); !a.Admitted() {
			t.Fatalf("admit %d: %+v", i, a)
		}
		res, err := lim.Allow(ctx, g.RateKey("s"), l.RedisRate())
		if err != nil || res.Allowed != 1 {
			t.Fatalf("redis_rate %d: %+v, %v", i, res, err)
		}
	}
	res, err := lim.Allow(ctx, g.RateKey("s"), l.RedisRate())
	if err != nil || res.Allowed != 0 {
		t.Fatalf("redis_rate after a burst of 4 spent half each way: %+v, %v", res, err)
	}
	a := admit()
	if a.Admitted() || a.Wait-res.RetryAfter > 5*time.Millisecond || res.RetryAfter-a.Wait > 5*time.Millisecond {
		t.Fatalf("admit wait %v vs redis_rate RetryAfter %v: they should agree", a.Wait, res.RetryAfter)
	}
}

func TestReserveSpacesSlots(t *testing.T) {
	g, ctx := newGates(t), context.Background()
	l := Limit{Rate: 10, Burst: 2, Period: time.Second}
	rs := make([]Reservation, 6)
	for i := range rs {
		rs[i] = Reservation{Subscriber: "s", Limit: l}
	}
	before := time.Now()
	wake, err := g.Reserve(ctx, rs...)
	if err != nil {
		t.Fatal(err)
	}
	// Redis' clock stands in for now: allow a little skew.
	const slop = 50 * time.Millisecond
	for i, w := range wake[:2] {
		if w.Before(before.Add(-slop)) || w.After(before.Add(slop)) {
			t.Errorf("burst slot %d at %v, want about now", i, w.Sub(before))
		}
	}
	for i := 2; i < len(wake); i++ {
		if gap := wake[i].Sub(wake[i-1]); gap < 99*time.Millisecond || gap > 101*time.Millisecond {
			t.Errorf("slot %d is %v after slot %d, want 100ms", i, gap, i-1)
		}
	}
	nb := time.Now().Add(time.Minute)
	late, err := g.Reserve(ctx, Reservation{Subscriber: "other", Limit: l, NotBefore: nb})
	if err != nil || late[0].Before(nb.Truncate(time.Millisecond)) {
		t.Fatalf("reservation with NotBefore %v got %v, %v", nb, late, err)
	}
}
