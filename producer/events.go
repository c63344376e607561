package producer

import (
	"context"
	"encoding/json"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// KEYS[1]: the event's hash (tasks.Keys.Event). ARGV: 1 Event JSON, 2
// retention ms, then the subscriber ids. The first publish's payload and
// time (Redis' clock, as the delivery records') are kept (a re-publish is
// a duplicate and delivers the first); every subscriber it is published
// to is added.
var storeEventScript = redis.NewScript(`
local t = redis.call('TIME')
redis.call('HSETNX', KEYS[1], 'ev', ARGV[1])
redis.call('HSETNX', KEYS[1], 'p', string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)))
for i = 3, #ARGV do redis.call('HSET', KEYS[1], 's:' .. ARGV[i], '1') end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'NX')
return 0`)

// storeEvent queues the write of ev's payload, once for all of subs, on
// the publish's pipeline.
func (p *Producer) storeEvent(ctx context.Context, pl redis.Pipeliner, ev tasks.Event, subs []tasks.Subscriber) {
	b, _ := json.Marshal(ev) // an Event always marshals
	args := make([]any, 0, 2+len(subs))
	args = append(args, b, p.cfg.PayloadRetention.Milliseconds())
	for _, s := range subs {
		args = append(args, s.ID)
	}
	// Eval, not Run: Run's NOSCRIPT fallback cannot work inside a pipeline.
	storeEventScript.Eval(ctx, pl, []string{p.keys.Event(ev.ID)}, args...)
}
