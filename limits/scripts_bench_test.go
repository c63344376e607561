package limits_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/limits"
)

// BenchmarkBatchScripts is what Redis spends on a batch's scripts, per
// delivery: a turn handing out 16 parked deliveries of one subscriber,
// their Admits as one group and their delivered outcomes as one commit
// group, on a redis-server of its own (its scripts' time in commandstats,
// and its process CPU). go test -run '^$' -bench BatchScripts ./limits/
//
// On a host whose speed moves from run to run (a shared VM's 2 cores:
// ±20 % here), the script times are also reported in units of a fixed
// reference script's (refScript, run in each iteration on a second
// redis-server, whose Lua heap the scripts' garbage does not reach):
// book÷ref (each booking a script of its own), turn÷ref, admit÷ref and
// commit÷ref, for comparing two builds.
func BenchmarkBatchScripts(b *testing.B) {
	ctx := context.Background()
	srv, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	bu := setupOn(b, redis.NewClient(&redis.Options{Addr: srv.Addr}))
	refSrv, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(refSrv.Stop)
	refc := redis.NewClient(&redis.Options{Addr: refSrv.Addr})
	b.Cleanup(func() { refc.Close() })
	const n = 16
	bu.pace.MaxInFlight = 1000
	bu.pace.Limit = limits.Limit{Rate: 1e6, Burst: 1e6, Period: time.Second}
	var usec [5]int64 // book, turn, admit, commit, the reference
	cpu := time.Duration(0)
	for i := range b.N {
		evs := make([]string, n)
		for j := range evs {
			evs[j] = fmt.Sprintf("e%d-%d", i, j)
		}
		bu.rdb.HSet(ctx, bu.k.Record, "paused", "bench")
		u0, _ := scriptUsec(b, bu.rdb)
		for _, ev := range evs {
			bu.book(b, ev)
		}
		bu.rdb.HDel(ctx, bu.k.Record, "paused")
		u1, c1 := scriptUsec(b, bu.rdb)
		if got := len(bu.turn(b).Handouts); got != n {
			b.Fatalf("a turn handed out %d, want %d", got, n)
		}
		u2, _ := scriptUsec(b, bu.rdb)
		rs := make([]limits.AdmitRequest, n)
		for j, ev := range evs {
			rs[j] = limits.AdmitRequest{EventID: ev, Token: limits.NewToken(), SlotTTL: time.Minute, Pace: bu.pace}
		}
		as, err := bu.g.AdmitGroup(ctx, bu.k, rs)
		if err != nil {
			b.Fatal(err)
		}
		u3, _ := scriptUsec(b, bu.rdb)
		os := make([]limits.Outcome, n)
		for j, a := range as {
			if !a.Admitted {
				b.Fatalf("%s: %+v", evs[j], a)
			}
			os[j] = limits.Outcome{EventID: evs[j], Token: rs[j].Token, Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(),
				AttemptField: "a1", Attempt: `{"at":1,"status":200}`, Answered: true, Dedup: time.Hour,
				Breaker: limits.BreakerPolicy{}.WithDefaults(), Limit: wide, Latency: 10 * time.Millisecond,
				Counters: map[string]int64{"delivered": 1, "http:200": 1}}
		}
		if _, err := bu.g.CommitGroup(ctx, bu.k, os); err != nil {
			b.Fatal(err)
		}
		u4, c4 := scriptUsec(b, bu.rdb)
		r0, _ := scriptUsec(b, refc)
		if err := refScript.Run(ctx, refc, []string{"{ref}:a", "{ref}:b"}).Err(); err != nil {
			b.Fatal(err)
		}
		r1, _ := scriptUsec(b, refc)
		usec[0] += u1 - u0
		usec[1] += u2 - u1
		usec[2] += u3 - u2
		usec[3] += u4 - u3
		usec[4] += r1 - r0
		cpu += c4 - c1
	}
	per := float64(b.N * n)
	b.ReportMetric(float64(usec[0])/per, "book-µs/delivery")
	b.ReportMetric(float64(usec[1])/per, "turn-µs/delivery")
	b.ReportMetric(float64(usec[2])/per, "admit-µs/delivery")
	b.ReportMetric(float64(usec[3])/per, "commit-µs/delivery")
	b.ReportMetric(float64(cpu.Microseconds())/per, "redis-cpu-µs/delivery")
	ref := float64(usec[4])
	b.ReportMetric(float64(usec[0])/ref, "book÷ref")
	b.ReportMetric(float64(usec[1])/ref, "turn÷ref")
	b.ReportMetric(float64(usec[2])/ref, "admit÷ref")
	b.ReportMetric(float64(usec[3])/ref, "commit÷ref")
}

// refScript is BenchmarkBatchScripts' yardstick, never changed: what a
// script of a group does, in a fixed amount (16 times a hash read, a
// hash write and a small table), whose time moves with the host's speed
// alone.
var refScript = redis.NewScript(`
for i = 1, 16 do
  local v = redis.call('HMGET', KEYS[1], 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h')
  redis.call('HSET', KEYS[2], 'f' .. i, i, 'g' .. i, #v)
  local t = {i, 'x', v[1] or '', tostring(i)}
  if #t ~= 4 then return redis.error_reply('unreachable') end
end
return 1`)

// scriptUsec is the time Redis spent in scripts (evalsha's and eval's
// usec) and its process CPU.
func scriptUsec(b *testing.B, c *redis.Client) (int64, time.Duration) {
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec int64
	var cpu time.Duration
	for line := range strings.SplitSeq(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		switch {
		case k == "cmdstat_evalsha" || k == "cmdstat_eval":
			for kv := range strings.SplitSeq(v, ",") {
				if u, ok := strings.CutPrefix(kv, "usec="); ok {
					n, _ := strconv.ParseInt(u, 10, 64)
					usec += n
				}
			}
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += time.Duration(f * float64(time.Second))
		}
	}
	return usec, cpu
}
