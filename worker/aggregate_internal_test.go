package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/tasks"
)

// A flush costs one HINCRBY per field that changed and one ZADD, however
// many runs were summed; a flush that fails keeps its sums for the next.
func TestTotalsFlushCostsFieldsNotRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	port, err := deploy.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	gone := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { gone.Close() })
	keys := tasks.Keys("totals")
	tot := newTotals(gone, keys, quiet, &Stats{})
	soon := time.Now().Add(time.Hour).UnixMilli()
	for i := range 10_000 {
		tot.addAll([]increment{{"s", "delivered", 1}, {"s", "http:200", 1}, {"s", "e2e_sum_ms", 3}})
		tot.cooling(fmt.Sprintf("s%d", i%50), time.UnixMilli(soon+int64(i)))
	}
	tot.cooling("ended", time.Now().Add(-time.Second)) // not listed: over
	tot.flush(ctx)                                     // Redis unreachable
	if tot.stats.RecordErrors.Load() != 1 {
		t.Fatal("a failed flush was not counted")
	}
	if got := tot.snapshot(); got["delivered"] != 10_000 || got["e2e_sum_ms"] != 30_000 {
		t.Fatalf("sums after a failed flush: %v", got)
	}

	r := ownRedis(t, deploy.RedisOpts{})
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { rdb.Close() })
	tot.rdb = rdb
	before := commandCalls(t, rdb)
	tot.flush(ctx)
	after := commandCalls(t, rdb)
	if n := after["hincrby"] - before["hincrby"]; n != 3 {
		t.Errorf("flush sent %d HINCRBY for 3 fields of 10,000 runs", n)
	}
	if n := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]; n != 1 {
		t.Errorf("flush ran %d scripts for 51 cooldowns, want 1", n)
	}
	got, err := readCounts(ctx, rdb, keys.Totals())
	if err != nil || got["delivered"] != 10_000 || got["http:200"] != 10_000 || got["e2e_sum_ms"] != 30_000 {
		t.Fatalf("totals %v (%v)", got, err)
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
	if len(tot.snapshot()) != 0 {
		t.Fatal("sums kept after a flush that went through")
	}
	tot.flush(ctx) // nothing new: no command
	if n := commandCalls(t, rdb)["hincrby"] - after["hincrby"]; n != 0 {
		t.Fatalf("an empty flush sent %d HINCRBY", n)
	}
}

// commandCalls reads INFO commandstats: command → calls.
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		cmd, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		var calls int64
		fmt.Sscanf(rest, "calls=%d", &calls)
		out[cmd] = calls
	}
	return out
}
