package limits

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
)

var rdb *redis.Client

func TestMain(m *testing.M) {
	r, err := deploy.StartRedis(context.Background(), deploy.RedisOpts{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rdb = redis.NewClient(&redis.Options{Addr: r.Addr})
	code := m.Run()
	rdb.Close()
	r.Stop()
	os.Exit(code)
}

var nsSeq atomic.Int64

func newGates(t *testing.T) *Gates {
	t.Parallel()
	return NewGates(rdb, fmt.Sprintf("t%d", nsSeq.Add(1)))
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

func TestAcquireCapsAndExpires(t *testing.T) {
	g, ctx := newGates(t), context.Background()
	var toks []string
	for range 2 {
		tok, cool, err := g.Acquire(ctx, "s", 2, 300*time.Millisecond)
		if err != nil || tok == "" || !cool.IsZero() {
			t.Fatalf("Acquire = %q, %v, %v", tok, cool, err)
		}
		toks = append(toks, tok)
	}
	if tok, _, _ := g.Acquire(ctx, "s", 2, time.Second); tok != "" {
		t.Fatal("third slot granted with max 2")
	}
	if err := g.Release(ctx, "s", toks[0]); err != nil {
		t.Fatal(err)
	}
	if tok, _, _ := g.Acquire(ctx, "s", 2, time.Minute); tok == "" {
		t.Fatal("slot not granted after release")
	}
	// toks[1] was never released, as by a crashed worker: it frees itself.
	deadline := time.Now().Add(5 * time.Second)
	for {
		tok, _, err := g.Acquire(ctx, "s", 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("expired slot was not reclaimed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAcquireRefusedDuringCooldown(t *testing.T) {
	g, ctx := newGates(t), context.Background()
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	if _, err := g.Cooldown(ctx, "s", until); err != nil {
		t.Fatal(err)
	}
	tok, cool, err := g.Acquire(ctx, "s", 5, time.Second)
	if err != nil || tok != "" || !cool.Equal(until) {
		t.Fatalf("Acquire during cooldown = %q, %v, %v; want refused until %v", tok, cool, err, until)
	}
}

func TestAllowDeniesPastBurst(t *testing.T) {
	g, ctx := newGates(t), context.Background()
	l := Limit{Rate: 10, Burst: 3, Period: time.Second}
	for i := range 3 {
		if wait, err := g.Allow(ctx, "s", l); err != nil || wait != 0 {
			t.Fatalf("request %d: wait %v, %v", i, wait, err)
		}
	}
	wait, err := g.Allow(ctx, "s", l)
	if err != nil || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("4th request: wait %v, %v; want (0, 100ms]", wait, err)
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
