package producer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// KEYS[1]: the event's key (tasks.Keys.Event, see tasks.ParseStoredEvent
// for its form). ARGV: 1 Event JSON, 2 how long to keep it at least (ms),
// then the subscriber ids. The first publish's event and time (Redis'
// clock, as the delivery records') are kept: a re-publish is a duplicate
// and delivers the first. Every subscriber it is published to is added.
var storeEventScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local head, ev
if v then
  local i = string.find(v, '\n', 1, true)
  head, ev = string.sub(v, 1, i - 1), string.sub(v, i + 1)
else
  local t = redis.call('TIME')
  head, ev = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)), ARGV[1]
end
local seen, changed = {}, not v
for s in string.gmatch(head, '%S+') do seen[s] = true end
for i = 3, #ARGV do
  if not seen[ARGV[i]] then head, seen[ARGV[i]], changed = head .. ' ' .. ARGV[i], true, true end
end
local ttl, want = redis.call('PTTL', KEYS[1]), tonumber(ARGV[2])
if changed then
  redis.call('SET', KEYS[1], head .. '\n' .. ev, 'PX', math.max(ttl, want))
elseif ttl < want then
  redis.call('PEXPIRE', KEYS[1], want)
end
return {}`)

// EventMargin is how long a stored event outlives the retry horizon of the
// tasks that refer to it, at least: a task comes due up to its horizon,
// and may run a little after it (asynq's forwarding, a lost lease's
// recovery) to be dead-lettered, with its event.
const EventMargin = 10 * time.Minute

// storeEvent is the write of ev, once for all of subs, in the publish's
// round trip. It is kept for the payload retention, and at least
// as long as a task published with it may still run (the longest retry
// horizon of subs, and EventMargin): a task carries only a reference to
// it.
func (p *Producer) storeEvent(ev tasks.Event, subs []tasks.Subscriber) *limits.Call {
	b, _ := json.Marshal(ev) // an Event always marshals
	keep := p.cfg.PayloadRetention
	args := make([]any, 0, 2+len(subs))
	args = append(args, b, 0)
	for _, s := range subs {
		keep = max(keep, cmp.Or(time.Duration(s.RetryHorizon), p.cfg.RetryHorizon)+EventMargin)
		args = append(args, s.ID)
	}
	args[1] = keep.Milliseconds()
	return &limits.Call{Script: storeEventScript, Keys: []string{p.keys.Event(ev.ID)}, Args: args}
}

// storedEvent reads event id: the event, its subscribers (sorted) and when
// it was first published.
func (p *Producer) storedEvent(ctx context.Context, id string) (tasks.Event, []string, time.Time, error) {
	v, err := p.rdb.Get(ctx, p.keys.Event(id)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return tasks.Event{}, nil, time.Time{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	ev, subs, published, ok := tasks.ParseStoredEvent(v)
	if !ok {
		return ev, nil, time.Time{}, fmt.Errorf("%w: %s (never published, or past the payload retention of %s)",
			ErrUnknownEvent, id, p.cfg.PayloadRetention)
	}
	return ev, subs, published, nil
}
