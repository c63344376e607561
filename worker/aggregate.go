package worker

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
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

	mu       sync.Mutex
	counts   map[string]int64            // Totals field → not yet written
	tenants  map[string]map[string]int64 // registered tenant → its TenantTotals field → not yet written
	counters map[string]int64            // Counters field → not yet written
	cool     map[string]int64            // subscriber → latest cooldown end, Unix ms in Redis' clock
	// pending is the flush sent whose reply did not come back, sent again
	// before anything newer: its tenants' keys and the script's arguments.
	pending     []any
	pendingKeys []string
	// id and seq name each flush, so that one sent twice (its reply lost,
	// and go-redis or the next flush sending it again) is added once.
	id  string
	seq int64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// totalsFlush is how often a worker process adds its sums to the totals.
const totalsFlush = time.Second

func newTotals(rdb redis.UniversalClient, keys tasks.Keys, log *slog.Logger, stats *Stats) *totals {
	return &totals{rdb: rdb, keys: keys, log: log, stats: stats, counts: map[string]int64{}, tenants: map[string]map[string]int64{}, counters: map[string]int64{},
		cool: map[string]int64{}, id: limits.NewToken(), stop: make(chan struct{}), done: make(chan struct{})}
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

// addFor counts n more of field for stored subscriber sub: in the totals,
// and in its tenant's (a registered tenant's: tasks.Keys.TenantTotals).
func (t *totals) addFor(sub, field string, n int64) {
	if t == nil || n == 0 {
		return
	}
	tenant := tasks.TenantOf(sub)
	t.mu.Lock()
	t.counts[field] += n
	if tenant != tasks.DefaultTenant {
		if t.tenants[tenant] == nil {
			t.tenants[tenant] = map[string]int64{}
		}
		t.tenants[tenant][field] += n
	}
	t.mu.Unlock()
}

// count counts n more of a namespace counter (tasks.Keys.Counters).
func (t *totals) count(field string, n int64) {
	if t == nil || n == 0 {
		return
	}
	t.mu.Lock()
	t.counters[field] += n
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

// flush writes what was summed since the last flush: one script for the
// counts (named by the flush, so that one sent twice adds once) and one
// for the cooldowns (idempotent). A flush whose reply did not come back may
// have been written: it is sent again as it was, under the same name,
// before anything newer, and what was summed meanwhile waits for the next.
func (t *totals) flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t.mu.Lock()
	retry := t.pending != nil
	t.mu.Unlock()
	for range 2 { // a retry, then what was summed meanwhile
		t.mu.Lock()
		if t.pending == nil {
			t.pending, t.pendingKeys = t.take()
		}
		args, tkeys, cool := t.pending, t.pendingKeys, t.cool
		t.cool = map[string]int64{}
		t.mu.Unlock()
		if args == nil && len(cool) == 0 {
			return
		}
		_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if args != nil {
				flushScript.Eval(ctx, p, append([]string{t.keys.Totals(), t.keys.TotalsFlushes(), t.keys.Counters()}, tkeys...), args...)
			}
			if len(cool) > 0 {
				cargs := make([]any, 0, 2*len(cool))
				for sub, ms := range cool {
					cargs = append(cargs, sub, ms)
				}
				coolingScript.Eval(ctx, p, []string{t.keys.Cooling()}, cargs...)
			}
			return nil
		})
		t.mu.Lock()
		if err != nil {
			for sub, ms := range cool {
				t.cool[sub] = max(t.cool[sub], ms)
			}
			t.mu.Unlock()
			t.stats.CommitErrors.Add(1)
			t.log.Warn("could not add to the namespace's totals; will retry", "err", err)
			return
		}
		t.pending, t.pendingKeys = nil, nil
		t.mu.Unlock()
		if !retry {
			return
		}
		retry = false
	}
}

// take names the sums not yet sent as the next flush and empties them: the
// flush script's arguments and its tenants' keys, or nil when there are
// none. t.mu is held.
func (t *totals) take() ([]any, []string) {
	if len(t.counts) == 0 && len(t.counters) == 0 {
		return nil, nil
	}
	t.seq++
	args := []any{t.id, t.seq}
	for f, n := range t.counts {
		args = append(args, "t", f, n)
	}
	for f, n := range t.counters {
		args = append(args, "c", f, n)
	}
	var keys []string
	for tenant, fs := range t.tenants {
		keys = append(keys, t.keys.TenantTotals(tenant))
		at := strconv.Itoa(3 + len(keys)) // its key's index
		for f, n := range fs {
			args = append(args, at, f, n)
		}
	}
	t.counts, t.counters, t.tenants = make(map[string]int64, len(t.counts)), map[string]int64{}, map[string]map[string]int64{}
	return args, keys
}

// KEYS: 1 the totals, 2 the flushes written (hash: process → its last
// flush's number), 3 the namespace counters, then tenants' totals. ARGV: 1
// the process, 2 the flush's number, then "t" (a totals field), "c" (a
// counter) or a tenant's key's index, a field and its increment, …. A
// flush this process wrote already adds nothing; a later one adds its own
// and the unwritten ones merged into it.
var flushScript = redis.NewScript(`
if tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') >= tonumber(ARGV[2]) then return 0 end
for i = 3, #ARGV, 3 do
  local key = KEYS[1]
  if ARGV[i] == 'c' then key = KEYS[3] elseif ARGV[i] ~= 't' then key = KEYS[tonumber(ARGV[i])] end
  redis.call('HINCRBY', key, ARGV[i + 1], ARGV[i + 2])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], 3600)
return 1`)

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

// ReadTotals returns the namespace's aggregate counters (tasks.Keys.Totals),
// with the fields of ReadStats summed over every subscriber, plus
// dead:undecodable for tasks whose payload named none. They lag the
// per-subscriber counters by a second or so.
func ReadTotals(ctx context.Context, rdb redis.UniversalClient, namespace string) (map[string]int64, error) {
	return readCounts(ctx, rdb, tasks.Keys(namespace).Totals())
}
