package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// The stored event's rules (tasks/event.go names its fields):
//
//   - one event per id: the first publish stores its body (what every
//     subscriber is sent, byte for byte) and digest; a publish of the id
//     with another type or data (compared as JSON values) is refused,
//     nothing written; the same event again only adds its subscribers and
//     extends its life.
//   - it lives from its due time on: until the latest due time it was
//     published with + max(payload retention, the longest retry horizon of
//     its subscribers + EventMargin), so that every delivery that refers to
//     it finds it for as long as it may run, and a resend finds it for the
//     retention.

// KEYS: 1 the event (hash), 2 the release before's copy (a string, read
// only). ARGV: 1 body, 2 digest ("" none: a resend or replay, which never
// conflicts), 3 how long to keep it from now at least (ms), then the
// subscriber ids. Reply {code}: "ok", or "conflict" (another event has
// the id: nothing written).
var storeEventScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local h = redis.call('HMGET', KEYS[1], 'b', 'h', 's')
if not h[1] then
  local legacy = redis.call('GET', KEYS[2])
  if legacy then
    local i = string.find(legacy, '\n', 1, true)
    local head = string.sub(legacy, 1, i - 1)
    local p = string.match(head, '^(%d+)')
    local subs = string.sub(head, string.len(p) + 2)
    redis.call('HSET', KEYS[1], 'b', string.sub(legacy, i + 1), 'p', p, 's', subs)
    h = {string.sub(legacy, i + 1), false, subs}
  end
end
if h[1] and h[2] and ARGV[2] ~= '' and h[2] ~= ARGV[2] then return {'conflict'} end
if not h[1] then
  redis.call('HSET', KEYS[1], 'b', ARGV[1], 'p', now, 's', '')
  h = {ARGV[1], false, ''}
end
if ARGV[2] ~= '' and not h[2] then redis.call('HSET', KEYS[1], 'h', ARGV[2]) end
local subs, seen, changed = h[3] or '', {}, false
for s in string.gmatch(subs, '%S+') do seen[s] = true end
for i = 4, #ARGV do
  if not seen[ARGV[i]] then
    subs, seen[ARGV[i]], changed = subs .. ' ' .. ARGV[i], true, true
  end
end
if changed then redis.call('HSET', KEYS[1], 's', subs) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return {'ok'}`)

// EventMargin is how long a stored event outlives the retry horizon of the
// deliveries that refer to it, at least: a delivery is handed out up to
// its horizon and runs a little after it (a busy lane, a lost lease's
// recovery) to be dead-lettered, with its event.
const EventMargin = 10 * time.Minute

// storeEvent stores ev for subs, due at notBefore (zero: now), in a round
// trip of its own before the bookings: a conflict must stop the publish
// before it books anything. compare refuses another event under the id
// (a publish); a resend or replay sends the event stored, and stores it
// again only if it expired.
func (p *Producer) storeEvent(ctx context.Context, ev tasks.Event, subs []tasks.Subscriber, notBefore time.Time, compare bool) error {
	digest := ""
	if compare {
		var err error
		if digest, err = tasks.EventDigest(ev.Type, ev.Data); err != nil {
			return &tasks.FieldError{Field: "data", Msg: "not valid JSON"}
		}
	}
	keep := p.cfg.PayloadRetention
	args := make([]any, 0, 3+len(subs))
	args = append(args, tasks.EventBody(ev), digest, 0)
	for _, s := range subs {
		keep = max(keep, p.horizon(s)+EventMargin)
		args = append(args, s.ID)
	}
	if d := time.Until(notBefore); d > 0 {
		keep += d
	}
	args[2] = keep.Milliseconds()
	res, err := storeEventScript.Run(ctx, p.rdb, []string{p.keys.Event(ev.ID), p.keys.LegacyEvent(ev.ID)}, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if res[0] == "conflict" {
		return fmt.Errorf("%w: event %s was published before with another type or other data; an id names one event: "+
			"publish this one under a new id", ErrEventConflict, ev.ID)
	}
	return nil
}

// StoredEvent reads event id as stored (by this release or the one before).
func (p *Producer) StoredEvent(ctx context.Context, id string) (tasks.StoredEvent, error) {
	var h *redis.MapStringStringCmd
	var legacy *redis.StringCmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		h, legacy = pl.HGetAll(ctx, p.keys.Event(id)), pl.Get(ctx, p.keys.LegacyEvent(id))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return tasks.StoredEvent{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if se, ok := tasks.ParseStoredEvent(h.Val()); ok {
		return se, nil
	}
	if se, ok := tasks.ParseLegacyEvent(legacy.Val()); ok {
		return se, nil
	}
	return tasks.StoredEvent{}, fmt.Errorf("%w: %s (never published, or past the payload retention of %s)",
		ErrUnknownEvent, id, p.cfg.PayloadRetention)
}
