package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// Operator events are ordinary hooklane events of the tasks.Operator*
// types, published through the producer to the subscribers whose filter
// names them (an operator endpoint, a chat relay, a pager), so they are
// signed, limited and retried like any webhook. Each is also logged and
// counted ("ops:<type>" in the namespace's counters, /metrics'
// hooklane_operator_events_total). Their ids derive from what they report,
// so one reported twice (two workers, a retry) is one event.
//
// No operator event reports on another: the dead letters of operator
// events are counted and logged, never reported in delivery.dead; the
// breaker events are caused by endpoint failures, not by events.

// FailingEvent is the data of hooklane.subscriber.failing,
// .recovered and .disabled.
type FailingEvent struct {
	SubscriberID string    `json:"subscriber_id"`
	FailingSince time.Time `json:"failing_since"`
	LastError    string    `json:"last_error,omitempty"`
	At           time.Time `json:"at"`               // when the breaker opened, closed, or the subscriber was disabled
	Reason       string    `json:"reason,omitempty"` // disabled: the pause reason ("failing")
}

// DeadEvent is the data of hooklane.delivery.dead: the dead letters of one
// subscriber since the last report (at most one a minute).
type DeadEvent struct {
	SubscriberID string       `json:"subscriber_id"`
	Count        int64        `json:"count"`
	Since        time.Time    `json:"since"`  // the first of them
	Sample       []DeadSample `json:"sample"` // up to 20, oldest first
}

// DeadSample is one dead letter in a DeadEvent.
type DeadSample struct {
	EventID string `json:"event_id"`
	Reason  string `json:"reason"`
}

// deadReportEvery is the least time between two delivery.dead events of
// one subscriber.
const deadReportEvery = time.Minute

// operatorEvent publishes one operator event; a failure is logged (the
// breaker's state and the counters keep the truth) and returned.
func (h *handler) operatorEvent(ctx context.Context, typ, id string, data any) error {
	b, _ := json.Marshal(data)
	ev := tasks.Event{ID: id, Type: typ, Data: b, Timestamp: time.Now().UTC().Truncate(time.Second)}
	res, err := h.prod.PublishOperatorEvent(ctx, ev)
	if err != nil {
		h.log.Error("could not publish an operator event", "type", typ, "event_id", id, "err", err)
		return err
	}
	if err := h.rdb.HIncrBy(ctx, h.keys.Counters(), "ops:"+typ, 1).Err(); err != nil {
		h.log.Warn("could not count an operator event", "type", typ, "err", err)
	}
	h.log.Info("operator event published", "type", typ, "event_id", id, "targets", len(res.Targets))
	return nil
}

// operatorEventID names the operator event of type typ about sub that
// reports what began at: the same report sent twice is one event. Event
// ids are at most 128 characters; the end, which tells them apart, is kept.
func operatorEventID(typ, sub string, at time.Time) string {
	id := fmt.Sprintf("%s-%s-%d", strings.TrimPrefix(typ, tasks.OperatorPrefix), sub, at.UnixMilli())
	if len(id) > 128 {
		id = id[len(id)-128:]
	}
	return id
}

// breakerEvent reports a breaker change of sub as an operator event.
func (h *handler) breakerEvent(ctx context.Context, typ, sub string, since, at time.Time, lastErr, reason string) {
	// One of each per streak of failures: named by its start.
	id := operatorEventID(typ, sub, since)
	_ = h.operatorEvent(ctx, typ, id, FailingEvent{SubscriberID: sub, FailingSince: since.UTC(), LastError: lastErr,
		At: at.UTC(), Reason: reason})
}

// KEYS: 1 dead batch, 2 its sample list. ARGV: 1 "<event id> <reason>".
// Adds a dead letter to the subscriber's unreported batch.
var deadBatchScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HSETNX', KEYS[1], 'first', string.format('%d', now))
if redis.call('LLEN', KEYS[2]) < 20 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
return 0`)

// batchDead queues a dead letter on p (the dead-letter write's
// transaction, in the subscriber's slot) into the subscriber's unreported
// batch. An operator event's dead letter is never batched: it is not
// reported in another.
func (h *handler) batchDead(ctx context.Context, p redis.Pipeliner, sub, eventID, reason string) {
	deadBatchScript.Eval(ctx, p, []string{h.keys.DeadBatch(sub), h.keys.DeadBatchSample(sub)}, eventID+" "+reason)
}

// dueDead lists sub among the subscribers whose dead letters are due to
// be reported: now, unless already listed (flushDead holds a report back
// until the last is a minute old).
func (h *handler) dueDead(ctx context.Context, sub string) {
	z := redis.Z{Score: float64(time.Now().UnixMilli()), Member: sub}
	if err := h.rdb.ZAddNX(ctx, h.keys.DeadReportsDue(), z).Err(); err != nil {
		h.log.Warn("could not list dead letters to report", "subscriber_id", sub, "err", err)
	}
}

// KEYS: 1 dead batch, 2 sample. ARGV: 1 least ms between reports. Reply
// {code, ...}: {0} nothing to report; {1, due ms}: reported less than a
// minute ago, due then; {2, n, first ms, sample...}: report these.
var deadPeekScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local b = redis.call('HMGET', KEYS[1], 'n', 'first', 'last_sent')
local n = tonumber(b[1]) or 0
if n <= 0 then return {'0'} end
local last = tonumber(b[3]) or 0
if now < last + tonumber(ARGV[1]) then return {'1', string.format('%d', last + tonumber(ARGV[1]))} end
local out = {'2', string.format('%d', n), b[2] or string.format('%d', now)}
for _, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do out[#out + 1] = v end
return out`)

// KEYS: 1 dead batch, 2 sample. ARGV: 1 how many were reported, 2 how
// many sample entries. Takes a report's dead letters off the batch; those
// added since stay for the next.
var deadAckScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local left = redis.call('HINCRBY', KEYS[1], 'n', -tonumber(ARGV[1]))
redis.call('LTRIM', KEYS[2], tonumber(ARGV[2]), -1)
redis.call('HSET', KEYS[1], 'last_sent', string.format('%d', now))
if left <= 0 then redis.call('HDEL', KEYS[1], 'n', 'first') else redis.call('HSET', KEYS[1], 'first', string.format('%d', now)) end
return left`)

// flushDead reports the dead letters of every subscriber that is due, each
// claimed by one worker (ZREM), at most one event per subscriber per
// minute. A report is published before it is taken off the batch: a worker
// dying between the two publishes it again under the same id (a
// duplicate, dropped), never loses it.
func (h *handler) flushDead(ctx context.Context) {
	due, err := h.rdb.ZRangeByScore(ctx, h.keys.DeadReportsDue(), &redis.ZRangeBy{Min: "-inf",
		Max: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: 100}).Result()
	if err != nil {
		return
	}
	for _, sub := range due {
		if n, err := h.rdb.ZRem(ctx, h.keys.DeadReportsDue(), sub).Result(); err != nil || n == 0 {
			continue // another worker has it
		}
		if err := h.reportDead(ctx, sub); err != nil {
			h.log.Warn("could not report dead letters; trying again", "subscriber_id", sub, "err", err)
			h.rdb.ZAdd(ctx, h.keys.DeadReportsDue(), redis.Z{Score: float64(time.Now().Add(5 * time.Second).UnixMilli()), Member: sub})
		}
	}
}

func (h *handler) reportDead(ctx context.Context, sub string) error {
	keys := []string{h.keys.DeadBatch(sub), h.keys.DeadBatchSample(sub)}
	res, err := deadPeekScript.Run(ctx, h.rdb, keys, h.cfg.DeadReportEvery.Milliseconds()).StringSlice()
	if err != nil {
		return err
	}
	switch res[0] {
	case "0":
		return nil
	case "1":
		at, _ := strconv.ParseInt(res[1], 10, 64)
		return h.rdb.ZAdd(ctx, h.keys.DeadReportsDue(), redis.Z{Score: float64(at), Member: sub}).Err()
	}
	n, _ := strconv.ParseInt(res[1], 10, 64)
	first, _ := strconv.ParseInt(res[2], 10, 64)
	ev := DeadEvent{SubscriberID: sub, Count: n, Since: time.UnixMilli(first).UTC(), Sample: []DeadSample{}}
	for _, s := range res[3:] {
		id, reason, _ := strings.Cut(s, " ")
		ev.Sample = append(ev.Sample, DeadSample{EventID: id, Reason: reason})
	}
	id := operatorEventID(tasks.OperatorDead, sub, ev.Since)
	if err := h.operatorEvent(ctx, tasks.OperatorDead, id, ev); err != nil {
		return err
	}
	return deadAckScript.Run(ctx, h.rdb, keys, n, len(ev.Sample)).Err()
}

// runDeadReports flushes due dead-letter reports every second until ctx is
// done.
func (h *handler) runDeadReports(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.flushDead(ctx)
		}
	}
}
