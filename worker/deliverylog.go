package worker

import (
	"context"
	"errors"
	"strconv"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// KEYS[1]: a delivery record (tasks.Keys.Delivery). ARGV: 1 state, 2 next
// attempt Unix ms ("" none), 3 delivered Unix ms ("" not), 4 the attempt's
// field ("" no attempt), 5 the attempt (tasks.EncodeAttempt), 6 ttl ms
// from now (0: keep the record's): for an ended delivery, which also drops
// the booking's wake-up, and a delivered one's queue (a re-publish needs
// them only while the task may not exist yet; a resend of a dead one finds
// its archived task there). A record that does not exist (a task of the
// release before, or past its retention) is not created.
var deliveryScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local set, del = {'s', ARGV[1]}, {}
if ARGV[2] ~= '' then set[#set + 1] = 'nx'; set[#set + 1] = ARGV[2] else del[#del + 1] = 'nx' end
if ARGV[3] ~= '' then set[#set + 1] = 'dl'; set[#set + 1] = ARGV[3] end
if ARGV[4] ~= '' then set[#set + 1] = ARGV[4]; set[#set + 1] = ARGV[5] end
redis.call('HSET', KEYS[1], unpack(set))
if ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[1], 'n', 1) end
if tonumber(ARGV[6]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  del[#del + 1] = 'w'
  if ARGV[1] == 'delivered' then del[#del + 1] = 'q' end
end
if #del > 0 then redis.call('HDEL', KEYS[1], unpack(del)) end
return 1`)

// deliveryState sets the state the run leaves its delivery in (see
// tasks.DeliveryRecord) from its outcome err, and when it is tried next.
func (r *run) deliveryState(err error) {
	var d *limits.DeferredError
	var re *RetryError
	switch {
	case err == nil:
		r.state = tasks.StateDelivered
	case errors.As(err, &d):
		r.next = d.Until
		switch d.Gate {
		case GateBreaker, GatePaused:
			r.state = tasks.StateHeld
		case GateCooldown, GateRetryAfter:
			r.state = tasks.StateCooling
		default: // rate limit, not-before, in-flight: waiting for its turn
			r.state = tasks.StateScheduled
		}
	case errors.Is(err, asynq.SkipRetry):
		r.state = tasks.StateDead
	case errors.As(err, &re):
		r.state, r.next = tasks.StateRetrying, r.retryAt
	}
	// An infrastructure error or a shutdown changes nothing: the task is
	// tried again as it was.
}

// logDelivery queues the write of run r's state and attempt to its
// delivery record on p, in the pipeline that already follows the request.
func (h *handler) logDelivery(ctx context.Context, p redis.Pipeliner, r *run) {
	if r.state == "" || r.d == nil {
		return
	}
	var next, delivered, field string
	var attempt []byte
	if !r.next.IsZero() {
		next = strconv.FormatInt(r.next.UnixMilli(), 10)
	}
	var ttl int64
	switch r.state {
	case tasks.StateDelivered:
		delivered = strconv.FormatInt(r.attempt.At.UnixMilli(), 10)
		ttl = h.cfg.DedupWindow.Milliseconds()
	case tasks.StateDead:
		ttl = h.cfg.DedupWindow.Milliseconds()
	}
	if r.attempt != nil {
		a := *r.attempt
		a.NextAt = r.next
		attempt = tasks.EncodeAttempt(a)
		field = tasks.AttemptField(a.At)
	}
	r.logKeys, r.logArgs = []string{r.keys.Deliveries + r.d.Event.ID}, []any{r.state, next, delivered, field, attempt, ttl}
	if r.logFull {
		deliveryScript.Eval(ctx, p, r.logKeys, r.logArgs...)
		return
	}
	// By its sha: the script's text is sent once (see noScript), not with
	// every delivery.
	r.logCmd = deliveryScript.EvalSha(ctx, p, r.logKeys, r.logArgs...)
}

// noScript sends again, with the script's text, the delivery-record writes
// of runs that Redis refused because it did not know the script yet (the
// first batch, or after a restart or failover): they did not run, and the
// rest of their pipeline did, so only they go again. cmds and err are the
// pipeline's; any other failure in it is err, and the batch goes again.
func (h *handler) noScript(ctx context.Context, runs []*run, cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if c.Err() != nil && !limits.IsNoScript(c.Err()) {
			return err
		}
	}
	var again []*run
	for _, r := range runs {
		if r.logCmd != nil && limits.IsNoScript(r.logCmd.Err()) {
			again = append(again, r)
		}
	}
	_, err = h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range again {
			deliveryScript.Eval(ctx, p, r.logKeys, r.logArgs...)
		}
		return nil
	})
	return err
}
