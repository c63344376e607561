package worker

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// totals sums, in this process's memory, every counter its runs add to
// their subscribers' Stats hashes, and the cooldowns its destinations were
// sent, and adds them namespace-wide (tasks.Keys.Totals, Cooling) with one
// pipeline every totalsFlush and when the worker stops. /metrics reads the
// namespace's aggregates from there at a cost that does not depend on the
// number of subscribers, and a delivery costs no Redis command of its own
// for them.
//
// What it holds is keyed by counter field (a few dozen: outcomes, gates,
// reasons, HTTP statuses, histogram buckets) and by subscriber cooling
// down, so a flush that fails is merged back and retried with the next one
// without growing without bound. What a process that dies holds (at most a
// second's worth) is lost from the totals, not from the per-subscriber
// counters.
//
// A nil *totals counts nothing.
type totals struct {
	rdb   redis.UniversalClient
	keys  tasks.Keys
	log   *slog.Logger
	stats *Stats

	mu     sync.Mutex
	counts map[string]int64 // Totals field → not yet written
	cool   map[string]int64 // subscriber → latest cooldown end, Unix ms in Redis' clock

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// totalsFlush is how often a worker process adds its sums to the totals.
const totalsFlush = time.Second

func newTotals(rdb redis.UniversalClient, keys tasks.Keys, log *slog.Logger, stats *Stats) *totals {
	return &totals{rdb: rdb, keys: keys, log: log, stats: stats, counts: map[string]int64{}, cool: map[string]int64{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// add counts n more of field (a Stats field).
func (t *totals) add(field string, n int64) {
	if t == nil || n == 0 {
		return
	}
	t.mu.Lock()
	t.counts[field] += n
	t.mu.Unlock()
}

// addAll counts the increments of a run whose counters were written.
func (t *totals) addAll(incs []increment) {
	if t == nil || len(incs) == 0 {
		return
	}
	t.mu.Lock()
	for _, i := range incs {
		t.counts[i.field] += i.n
	}
	t.mu.Unlock()
}

// cooling notes that subscriber sub's destination cools down until until
// (Redis' clock).
func (t *totals) cooling(sub string, until time.Time) {
	if t == nil || sub == "" || until.IsZero() {
		return
	}
	ms := until.UnixMilli()
	t.mu.Lock()
	t.cool[sub] = max(t.cool[sub], ms)
	t.mu.Unlock()
}

// run flushes every totalsFlush until close, then once more.
func (t *totals) run() {
	defer close(t.done)
	tick := time.NewTicker(totalsFlush)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			t.flush(context.Background())
		case <-t.stop:
			t.flush(context.Background())
			return
		}
	}
}

// close stops run after a last flush. Counts added later stay in memory,
// unwritten.
func (t *totals) close() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

// flush writes what was summed since the last flush in one pipeline: one
// HINCRBY per field that changed and one script for the cooldowns. What
// cannot be written is merged back for the next flush.
func (t *totals) flush(ctx context.Context) {
	t.mu.Lock()
	counts, cool := t.counts, t.cool
	if len(counts) == 0 && len(cool) == 0 {
		t.mu.Unlock()
		return
	}
	t.counts, t.cool = make(map[string]int64, len(counts)), map[string]int64{}
	t.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		key := t.keys.Totals()
		for f, n := range counts {
			p.HIncrBy(ctx, key, f, n)
		}
		if len(cool) > 0 {
			args := make([]any, 0, 2*len(cool))
			for sub, ms := range cool {
				args = append(args, sub, ms)
			}
			coolingScript.Eval(ctx, p, []string{t.keys.Cooling()}, args...)
		}
		return nil
	})
	if err == nil {
		return
	}
	// A pipeline is not atomic, and it is not known which commands went
	// through: retrying them all may count some twice, dropping them may
	// miss some. Counters are retried (a Redis that failed mid-pipeline
	// usually ran none of it); cooldowns are idempotent.
	t.stats.RecordErrors.Add(1)
	t.log.Warn("could not add to the namespace's totals; will retry", "err", err)
	t.mu.Lock()
	for f, n := range counts {
		t.counts[f] += n
	}
	for sub, ms := range cool {
		t.cool[sub] = max(t.cool[sub], ms)
	}
	t.mu.Unlock()
}

// KEYS[1]: the cooling set. ARGV: subscriber, cooldown end (Unix ms, Redis'
// clock), … Drops the cooldowns that have ended, then adds the ones given
// that have not, each subscriber keeping its latest.
var coolingScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #ARGV, 2 do
  if tonumber(ARGV[i + 1]) > now then redis.call('ZADD', KEYS[1], 'GT', ARGV[i + 1], ARGV[i]) end
end
return 0`)

// snapshot returns the sums not yet written (for tests).
func (t *totals) snapshot() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.counts)
}

// increment is one counter increment of a run's subscriber (tasks.Keys.Stats).
type increment struct {
	key, field string
	n          int64
}

// ReadTotals returns the namespace's aggregate counters (tasks.Keys.Totals),
// with the fields of ReadStats summed over every subscriber, plus
// dead:undecodable for tasks whose payload named none. They lag the
// per-subscriber counters by a second or so.
func ReadTotals(ctx context.Context, rdb redis.UniversalClient, namespace string) (map[string]int64, error) {
	return readCounts(ctx, rdb, tasks.Keys(namespace).Totals())
}
