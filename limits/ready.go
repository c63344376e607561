package limits

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The ready index of a region (tasks.Keys.Ready and Claimed): which
// subscribers' schedules need a dispatcher's turn, and when.

// KEYS: 1 ready, 2 claimed. ARGV: 1 the most subscribers, 2 claim lease
// ms. Claims lapsed (their dispatcher died) go back to ready first. Reply
// {next, sub, sub, …}: the subscribers claimed (due now, moved from ready
// to claimed with the lease), and when the earliest one left is due (-1:
// none).
var claimScript = script(`
local now = now_ms()
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('ZREM', KEYS[2], s)
  redis.call('ZADD', KEYS[1], 'LT', now, s)
end
local subs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local out = {-1}
for _, s in ipairs(subs) do
  redis.call('ZREM', KEYS[1], s)
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), s)
  out[#out + 1] = s
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then out[1] = tonumber(head[2]) end
return out`)

// KEYS: 1 ready, 2 claimed. ARGV: sub, next ms (-1 none), sub, next, …
// Ends each claim and gives the subscriber its next time, unless an
// earlier one was written while it was claimed (ZADD LT keeps the earlier).
var releaseScript = script(`
for i = 1, #ARGV, 2 do
  redis.call('ZREM', KEYS[2], ARGV[i])
  local next = tonumber(ARGV[i + 1])
  if next >= 0 then redis.call('ZADD', KEYS[1], 'LT', next, ARGV[i]) end
end
return 0`)

// ClaimLease is how long a dispatcher holds a claimed subscriber: one that
// dies meanwhile leaves it to another after the lease.
const ClaimLease = 5 * time.Second

// Claim claims up to n subscribers whose turn is due in the ready index of
// ready/claimed, and says when the next one is (zero: none).
func (g *Gates) Claim(ctx context.Context, ready, claimed string, n int) ([]string, time.Time, error) {
	res, err := claimScript.Run(ctx, g.rdb, []string{ready, claimed}, n, ClaimLease.Milliseconds()).Slice()
	if err != nil {
		return nil, time.Time{}, err
	}
	r := replyStrings(res)
	var next time.Time
	if ms, _ := strconv.ParseInt(r[0], 10, 64); ms >= 0 {
		next = time.UnixMilli(ms)
	}
	return r[1:], next, nil
}

// Release ends the claims of subs, each with its next turn (zero: none).
func (g *Gates) Release(ctx context.Context, ready, claimed string, subs []string, next []time.Time) error {
	if len(subs) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(subs))
	for i, s := range subs {
		ms := int64(-1)
		if !next[i].IsZero() {
			ms = next[i].UnixMilli()
		}
		args = append(args, s, ms)
	}
	return releaseScript.Run(ctx, g.rdb, []string{ready, claimed}, args...).Err()
}

// notifyAt reads a script's answer of when the subscriber needs a turn:
// Unix ms, -1 none, or "a" and the time when a turn no later is asked of
// the ready index already (lua.go's asked).
func notifyAt(v string) (at time.Time, asked bool) {
	v, asked = strings.CutPrefix(v, "a")
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.UnixMilli(n), asked
	}
	return time.Time{}, false
}

// NotifyIn queues, on a pipeline, that sub's schedule needs a turn at at
// (zero: now) in the ready index ready: the earlier of that and the time
// it has.
func NotifyIn(ctx context.Context, p redis.Pipeliner, ready, sub string, at time.Time) {
	score := float64(0) // "now": any time already past is due
	if !at.IsZero() {
		score = float64(at.UnixMilli())
	}
	p.ZAddLT(ctx, ready, redis.Z{Score: score, Member: sub})
}

// Notify is NotifyIn in a round trip of its own.
func (g *Gates) Notify(ctx context.Context, ready, sub string, at time.Time) error {
	_, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		NotifyIn(ctx, p, ready, sub, at)
		return nil
	})
	return err
}
