package limits

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// The rescuer's side of the invariant of doc.go ("a delivery is always
// somewhere that moves it"): every place a delivery waits in is a sorted
// set scored by when it must move (lot: due; exp: horizon; out: hand-out
// lease; runs: the run's slot), and a turn looks at each once its time has
// come — provided the subscriber has a turn due in its region's ready
// index. Overdue finds a subscriber whose earliest time is long past, and
// the rescuer then gives it a turn if none is claimed or due soon.

// KEYS: 1 lot, 2 exp, 3 out, 4 runs, 5 gate, 6 cooldown, 7 inflight.
// ARGV: 1 grace ms. Reply: 2 when a resume (gate wk) waits for a turn since
// more than grace ms; else 1 when something of the subscriber was to move
// at least grace ms ago (Redis' clock); else 0. Reads only.
//
// What was to move, and when: the heads of exp, out and runs, whatever
// holds the subscriber (a turn looks at them in any case); and the lot's
// head, when nothing of the subscriber is under way (no live entry in
// out, runs or the in-flight slots: one that is commits, or lapses into
// out's or runs' head, and its commit asks the turn) and it is not
// paused, no sooner than the cooldown's end, the open breaker's next
// probe, or the rate's next chunk the last turn waits for (wr).
var overdueScript = script(`
local now = now_ms()
local before = now - tonumber(ARGV[1])
local g = redis.call('HMGET', KEYS[5], 'wk', 'paused', 'b_open', 'b_next', 'b_probe', 'wr')
local wk = tonumber(g[1] or '-1')
if wk >= 0 and wk <= before then return 2 end
local head = nil
local function at(v)
  v = tonumber(v)
  if v and (not head or v < head) then head = v end
end
for i = 2, 4 do at((redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES'))[2]) end
local lot = (redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES'))[2]
if lot and not g[2] and redis.call('ZCOUNT', KEYS[3], now, '+inf') == 0 and redis.call('ZCOUNT', KEYS[4], now, '+inf') == 0
  and redis.call('ZCOUNT', KEYS[7], now, '+inf') == 0 then
  local t = math.max(tonumber(lot), tonumber(redis.call('GET', KEYS[6]) or '0'), tonumber(g[6] or '0'))
  if g[3] then t = math.max(t, tonumber(g[4] or '0'), tonumber(g[5] or '0')) end
  at(t)
end
if head and head <= before then return 1 end
return 0`)

// Overdue says whether subscriber k needs a turn it may not have (see
// overdueScript): Woken, a resume more than grace ago that no turn has
// seen (its ready entry may be the far horizon's a paused subscriber had);
// Late, a delivery that was to move more than grace ago (it needs a turn
// if none is due within grace or claimed: a ready entry later than that
// is one a lost write of the ready index left, the write that was to make
// it earlier).
func (g *Gates) Overdue(ctx context.Context, k GateKeys, grace time.Duration) (woken, late bool, err error) {
	n, err := overdueScript.Run(ctx, g.rdb, []string{k.Lot, k.Exp, k.Out, k.Runs, k.Record, k.Cooldown, k.InFlight}, grace.Milliseconds()).Int64()
	return n == 2, n >= 1, err
}

// KEYS: 1 gate. Resumes a paused subscriber and notes that it needs a turn
// (wk: the next turn deletes it, and the rescuer gives one to a subscriber
// whose wk is older than its grace), in one step: a resume whose write of
// the ready index is lost (the process that made it died) is not left to
// the far turn of the horizon its paused schedule had.
var resumeScript = script(`
redis.call('HDEL', KEYS[1], 'paused', 'paused_at')
redis.call('HSET', KEYS[1], 'wk', (now_ms()))
return 1`)

// Resume ends subscriber k's pause (see resumeScript); write the ready
// index after it (Notify).
func (g *Gates) Resume(ctx context.Context, k GateKeys) error {
	return resumeScript.Run(ctx, g.rdb, []string{k.Record}).Err()
}

// KEYS: 1 lease. ARGV: 1 holder, 2 lease ms. Takes or keeps the lease for
// holder. Reply 1 held, 0 another holds it.
var leaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`)

// Lease takes or keeps key for holder for d, unless another holds it.
func (g *Gates) Lease(ctx context.Context, key, holder string, d time.Duration) (bool, error) {
	n, err := leaseScript.Run(ctx, g.rdb, []string{key}, holder, d.Milliseconds()).Int64()
	return n == 1, err
}
