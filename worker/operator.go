package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/producer"
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

// operatorEvent publishes one operator event of type typ about
// subscriber sub (its stored id) that reports what began at: to the
// operator's subscribers of that type, and, for a tenant's subscriber, to
// that tenant's too (an operational webhook of its own, signed with its
// own secret), each naming the subscriber by the id it knows it by
// (data(id): the operator's, "<tenant>/<id>"; the tenant's, its id). A
// failure is logged (the breaker's state and the counters keep the truth)
// and returned, the rest published still; publishing again is one event
// (its id derives from what it reports).
func (h *handler) operatorEvent(ctx context.Context, typ, sub string, at time.Time, data func(subID string) any) error {
	var errs []error
	for i, a := range h.audiences(sub) {
		id := operatorEventID(typ, a.shown, at)
		b, _ := json.Marshal(data(a.shown))
		ev := tasks.Event{ID: id, Type: typ, Data: b, Timestamp: time.Now().UTC().Truncate(time.Second)}
		res, err := a.p.PublishOperatorEvent(ctx, ev)
		if err != nil {
			h.log.Error("could not publish an operator event", "type", typ, "event_id", id, "tenant", a.p.TenantName(), "err", err)
			errs = append(errs, err)
			continue
		}
		if i == 0 {
			h.totals.count("ops:"+typ, 1) // with the next flush, once
		}
		h.log.Info("operator event published", "type", typ, "event_id", id, "tenant", a.p.TenantName(), "targets", len(res.Targets))
	}
	return errors.Join(errs...)
}

// audience is who an operator event goes to: a producer, and the id it
// knows the subscriber by.
type audience struct {
	p     *producer.Producer
	shown string
}

// audiences are the operator (every subscriber, by its stored id) and,
// for a tenant's subscriber, its tenant (by its own id).
func (h *handler) audiences(sub string) []audience {
	out := []audience{{h.prod, sub}}
	if t, id := tasks.SplitScoped(sub); t != tasks.DefaultTenant {
		if tp, err := h.prod.Tenant(t); err == nil {
			out = append(out, audience{tp, id})
		}
	}
	return out
}

// operatorEventID names the operator event of type typ about sub that
// reports what began at: the same report sent twice is one event. Event
// ids are at most 128 characters; the end, which tells them apart, is kept;
// a tenant's subscriber's stored id "<tenant>/<id>" is written
// "<tenant>~<id>" (an event id holds no slash, a subscriber id no tilde).
func operatorEventID(typ, sub string, at time.Time) string {
	sub = strings.ReplaceAll(sub, "/", "~")
	id := fmt.Sprintf("%s-%s-%d", strings.TrimPrefix(typ, tasks.OperatorPrefix), sub, at.UnixMilli())
	if len(id) > 128 {
		id = id[len(id)-128:]
	}
	return id
}

// breakerEvent reports a breaker change of sub as an operator event.
func (h *handler) breakerEvent(ctx context.Context, typ, sub string, since, at time.Time, lastErr, reason string) {
	// One of each per streak of failures: named by its start.
	_ = h.operatorEvent(ctx, typ, sub, since, func(id string) any {
		return FailingEvent{SubscriberID: id, FailingSince: since.UTC(), LastError: lastErr, At: at.UTC(), Reason: reason}
	})
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

// KEYS[1]: the reports due. ARGV: 1 the most to claim, 2 lease ms. Claims
// the subscribers whose report is due by moving each one's time a lease
// ahead (not removing it: a worker that dies with a claim leaves it to the
// next after the lease). Reply: sub, claim ms, sub, claim ms, …
var claimReportsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out = {}
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))) do
  local claim = now + tonumber(ARGV[2])
  redis.call('ZADD', KEYS[1], claim, s)
  out[#out + 1], out[#out + 2] = s, string.format('%d', claim)
end
return out`)

// KEYS[1]: the reports due. ARGV: 1 subscriber, 2 the claim (ms), 3 the
// next time (ms, -1: none). Ends a claim: the subscriber is due again then,
// or no more; unless another worker claimed it since (its time is not this
// claim).
var endReportScript = redis.NewScript(`
if redis.call('ZSCORE', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if tonumber(ARGV[3]) < 0 then redis.call('ZREM', KEYS[1], ARGV[1]) else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
return 1`)

// reportLease is how long a claim on a subscriber's report holds.
const reportLease = 30 * time.Second

// flushDead reports the dead letters of every subscriber whose report is
// due, each claimed by one worker with a lease, at most one event per
// subscriber per DeadReportEvery. A report is published, then taken off
// the batch, then its claim ended: a worker that dies between any two
// leaves the claim to lapse, and the next worker publishes the report
// again under the same id (one event: the receivers' dedup), never loses it.
func (h *handler) flushDead(ctx context.Context) {
	res, err := claimReportsScript.Run(ctx, h.rdb, []string{h.keys.DeadReportsDue()}, 100, reportLease.Milliseconds()).StringSlice()
	if err != nil {
		return
	}
	for i := 0; i+1 < len(res); i += 2 {
		sub, claim := res[i], res[i+1]
		next, err := h.reportDead(ctx, sub)
		if err != nil {
			h.log.Warn("could not report dead letters; trying again after the claim's lease", "subscriber_id", sub, "err", err)
			continue
		}
		ms := int64(-1)
		if !next.IsZero() {
			ms = next.UnixMilli()
		}
		if err := endReportScript.Run(ctx, h.rdb, []string{h.keys.DeadReportsDue()}, sub, claim, ms).Err(); err != nil {
			h.log.Warn("could not end a report's claim; it lapses by itself", "subscriber_id", sub, "err", err)
		}
	}
}

// reportDead publishes subscriber sub's unreported dead letters, unless it
// was reported less than DeadReportEvery ago: then it answers when the
// next report is due.
func (h *handler) reportDead(ctx context.Context, sub string) (time.Time, error) {
	keys := []string{h.keys.DeadBatch(sub), h.keys.DeadBatchSample(sub)}
	res, err := deadPeekScript.Run(ctx, h.rdb, keys, h.cfg.DeadReportEvery.Milliseconds()).StringSlice()
	if err != nil {
		return time.Time{}, err
	}
	switch res[0] {
	case "0":
		return time.Time{}, nil
	case "1":
		at, _ := strconv.ParseInt(res[1], 10, 64)
		return time.UnixMilli(at), nil
	}
	n, _ := strconv.ParseInt(res[1], 10, 64)
	first, _ := strconv.ParseInt(res[2], 10, 64)
	ev := DeadEvent{SubscriberID: sub, Count: n, Since: time.UnixMilli(first).UTC(), Sample: []DeadSample{}}
	for _, s := range res[3:] {
		id, reason, _ := strings.Cut(s, " ")
		ev.Sample = append(ev.Sample, DeadSample{EventID: id, Reason: reason})
	}
	if err := h.operatorEvent(ctx, tasks.OperatorDead, sub, ev.Since, func(id string) any {
		e := ev
		e.SubscriberID = id
		return e
	}); err != nil {
		return time.Time{}, err
	}
	if err := deadAckScript.Run(ctx, h.rdb, keys, n, len(ev.Sample)).Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, nil
}

// reports runs the dead-letter reports every second until stop.
type reports struct {
	h      *handler
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newReports(h *handler) *reports {
	ctx, cancel := context.WithCancel(context.Background())
	return &reports{h: h, ctx: ctx, cancel: cancel}
}

func (r *reports) start() {
	r.wg.Go(func() { every(r.ctx, time.Second, func() { r.h.flushDead(r.ctx) }) })
}

// stop ends the reports (one under way is finished, or left to its
// claim's lease) and waits.
func (r *reports) stop() {
	r.cancel()
	r.wg.Wait()
}
