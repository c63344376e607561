package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// loseReply runs a pipeline of scripts and then answers an error, as when
// the reply of a pipeline Redis did run is lost, while on.
type loseReply struct{ on atomic.Bool }

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.on.Load() && strings.HasPrefix(cmds[0].Name(), "eval") { // not a connection's hello
			return errors.New("connection reset (reply lost)")
		}
		return err
	}
}

func startRedis(t *testing.T) *redis.Client {
	t.Helper()
	r, err := deploy.StartRedis(context.Background(), deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// A flush costs one script for the counts, however many runs were summed,
// and one for the cooldowns; a flush whose reply was lost is sent again as
// it was and adds once, and what was summed meanwhile is added by the next
// flush, once.
func TestTotalsFlushIsAddedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := startRedis(t)
	lose := &loseReply{}
	rdb.AddHook(lose)
	keys := tasks.Keys("totals")
	tot := newTotals(rdb, keys, slog.New(slog.NewTextHandler(io.Discard, nil)), &Stats{})
	soon := time.Now().Add(time.Hour).UnixMilli()
	for i := range 10_000 {
		tot.add("delivered", 1)
		tot.add("http:200", 1)
		tot.add("e2e_sum_ms", 3)
		tot.cooling(fmt.Sprintf("s%d", i%50), time.UnixMilli(soon+int64(i)))
	}
	tot.count(DroppedDeleted, 2)
	tot.cooling("ended", time.Now().Add(-time.Second)) // not listed: over
	tot.addFor("acme/s1", "delivered", 7)              // a tenant's: its own hash too
	tot.addFor("s1", "delivered", 1)                   // the default tenant's: the totals only

	lose.on.Store(true)
	tot.flush(ctx) // written, but the worker does not know
	lose.on.Store(false)
	if tot.stats.CommitErrors.Load() != 1 {
		t.Fatal("a flush without its reply was not counted as an error")
	}
	tot.add("delivered", 5)
	tot.addFor("acme/s2", "http:200", 2)
	before := testkit.CommandCalls(t, rdb)
	tot.flush(ctx) // the lost one again, then the 5
	after := testkit.CommandCalls(t, rdb)
	if n := after["hincrby"] - before["hincrby"]; n != 3 {
		t.Errorf("the retry and the next flush sent %d HINCRBY; want 3 (the retry adds nothing)", n)
	}
	got, err := readCounts(ctx, rdb, keys.Totals())
	if err != nil || got["delivered"] != 10_013 || got["http:200"] != 10_002 || got["e2e_sum_ms"] != 30_000 {
		t.Fatalf("totals %v (%v); want delivered 10013, http:200 10002, e2e_sum_ms 30000", got, err)
	}
	if acme, err := readCounts(ctx, rdb, keys.TenantTotals("acme")); err != nil || acme["delivered"] != 7 || acme["http:200"] != 2 || len(acme) != 2 {
		t.Fatalf("tenant acme's totals %v (%v); want delivered 7, http:200 2", acme, err)
	}
	if n := rdb.Exists(ctx, keys.TenantTotals(tasks.DefaultTenant)).Val(); n != 0 {
		t.Fatal("the default tenant has a totals hash of its own")
	}
	if c, err := readCounts(ctx, rdb, keys.Counters()); err != nil || c[DroppedDeleted] != 2 {
		t.Fatalf("counters %v (%v); want dropped:deleted 2", c, err)
	}
	zs, err := rdb.ZRangeWithScores(ctx, keys.Cooling(), 0, -1).Result()
	if err != nil || len(zs) != 50 {
		t.Fatalf("cooling set %v (%v), want 50 subscribers", zs, err)
	}
	for _, z := range zs {
		if z.Member == "s0" && z.Score != float64(soon+9_950) {
			t.Fatalf("s0 cools until %v, want its latest cooldown (%d)", z.Score, soon+9_950)
		}
	}
	tot.flush(ctx) // nothing new: no command
	if n := testkit.CommandCalls(t, rdb)["evalsha"] + testkit.CommandCalls(t, rdb)["eval"] - after["evalsha"] - after["eval"]; n != 0 {
		t.Fatalf("an empty flush ran %d scripts", n)
	}
}
