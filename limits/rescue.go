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
// the rescuer then gives it a turn if none is due or claimed.

// KEYS: 1 lot, 2 exp, 3 out, 4 runs. ARGV: 1 grace ms. Reply: the
// earliest score of the four (Unix ms) if it is at least grace ms in the
// past (Redis' clock), else -1. Reads only.
var overdueScript = script(`
local now = now_ms()
local head = nil
for i = 1, 4 do
  local z = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if z[2] and (not head or tonumber(z[2]) < head) then head = tonumber(z[2]) end
end
if head and head <= now - tonumber(ARGV[1]) then return head end
return -1`)

// Overdue is the earliest time one of subscriber k's deliveries was to
// move (see overdueScript), if that was more than grace ago; else zero.
func (g *Gates) Overdue(ctx context.Context, k GateKeys, grace time.Duration) (time.Time, error) {
	n, err := overdueScript.Run(ctx, g.rdb, []string{k.Lot, k.Exp, k.Out, k.Runs}, grace.Milliseconds()).Int64()
	if err != nil || n < 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(n), nil
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
