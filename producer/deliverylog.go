package producer

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// The delivery log: one record per (subscriber, event) in the
// subscriber's slot (tasks.Keys.Delivery), written by the publish that
// books it, marked in flight by the gate that admits it and completed by
// the worker's writes after each request, all in round trips they already
// make; a stream per subscriber lists them in publish order
// (tasks.Keys.DeliveryLog); each event's payload is kept once
// (tasks.Keys.Event).

// GetDelivery returns the record of event eventID's delivery to
// subscriber sub, with its attempts.
func (p *Producer) GetDelivery(ctx context.Context, sub, eventID string) (tasks.DeliveryRecord, error) {
	if err := tasks.ValidateSubscriberID(sub); err != nil {
		return tasks.DeliveryRecord{}, err
	}
	if err := tasks.ValidateEventID(eventID); err != nil {
		return tasks.DeliveryRecord{}, err
	}
	return p.delivery(ctx, p.sid(sub), eventID)
}

// delivery is GetDelivery of subscriber stored (its stored id: any
// tenant's), its record's subscriber id p's.
func (p *Producer) delivery(ctx context.Context, stored, eventID string) (tasks.DeliveryRecord, error) {
	sub := p.ext(stored)
	var h *redis.MapStringStringCmd
	var g gateReads
	var now *redis.TimeCmd
	if _, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		h, now, g = pl.HGetAll(ctx, p.keys.Delivery(stored, eventID)), pl.Time(ctx), p.gateReadsIn(ctx, pl, stored)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) { // no cooldown key: Nil
		return tasks.DeliveryRecord{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	d, ok := tasks.ParseDeliveryRecord(sub, eventID, h.Val(), true)
	if !ok {
		return d, fmt.Errorf("%w: event %s to subscriber %s", ErrUnknownDelivery, eventID, sub)
	}
	showParked(&d, g, now.Val())
	return d, nil
}

// DeliveryQuery selects a subscriber's deliveries. Zero fields do not
// filter.
type DeliveryQuery struct {
	State string    // one of tasks.States
	Since time.Time // published at or after
	Until time.Time // published before
	// Limit caps a page: default 100, at most 1,000.
	Limit int
	// Cursor continues where the page that returned it ended ("": from the
	// newest). Opaque.
	Cursor string
	// Attempts decodes each record's attempts too (they are read anyway:
	// the cost is the decoding's).
	Attempts bool
}

// Deliveries returns a page of subscriber sub's deliveries, newest
// published first, without their attempts unless asked for, and the cursor of the next page
// ("" when there is none). A page reads at most ten times Limit log
// entries, so its cost is bounded however many the state filter skips: it
// may hold fewer than Limit (even none) and still have a next one.
func (p *Producer) Deliveries(ctx context.Context, sub string, q DeliveryQuery) ([]tasks.DeliveryRecord, string, error) {
	if q.State != "" && !slices.Contains(tasks.States, q.State) {
		return nil, "", &tasks.FieldError{Field: "state", Msg: "want one of " + strings.Join(tasks.States, ", ")}
	}
	if _, err := p.GetSubscriber(ctx, sub); err != nil {
		return nil, "", err
	}
	n := q.Limit
	if n <= 0 {
		n = 100
	}
	n = min(n, 1000)
	hi, lo := "+", "-"
	if !q.Until.IsZero() {
		hi = "(" + strconv.FormatInt(q.Until.UnixMilli(), 10)
	}
	if !q.Since.IsZero() {
		lo = strconv.FormatInt(q.Since.UnixMilli(), 10)
	}
	if q.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err != nil || !validStreamID(string(b)) {
			return nil, "", fmt.Errorf("%w: %q", ErrBadCursor, q.Cursor)
		}
		hi = "(" + string(b)
	}
	stored := p.sid(sub)
	log := p.keys.DeliveryLog(stored)
	var out []tasks.DeliveryRecord
	for budget := 10 * n; len(out) < n && budget > 0; {
		batch := min(n-len(out), budget)
		entries, err := p.rdb.XRevRangeN(ctx, log, hi, lo, int64(batch)).Result()
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		budget -= len(entries)
		subs, ids := make([]string, len(entries)), make([]string, len(entries))
		for i, e := range entries {
			subs[i] = stored
			ids[i], _ = e.Values["e"].(string)
		}
		recs, err := p.readRecords(ctx, subs, ids, q.Attempts)
		if err != nil {
			return nil, "", err
		}
		for _, r := range recs {
			if q.State == "" || r.State == q.State {
				r.SubscriberID = sub
				out = append(out, r)
			}
		}
		if len(entries) < batch {
			return out, "", nil
		}
		hi = "(" + entries[len(entries)-1].ID
	}
	return out, base64.RawURLEncoding.EncodeToString([]byte(hi[1:])), nil
}

// validStreamID reports whether s is a Redis stream id ("<ms>-<seq>").
func validStreamID(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return ok && err1 == nil && err2 == nil
}

// readRecords reads the records of event ids[i] to subscribers subs[i],
// with their attempts or not, a parked one's state as it is now (showParked),
// in one round trip (one per Cluster node); those
// gone (past their retention) are left out.
func (p *Producer) readRecords(ctx context.Context, subs, ids []string, attempts bool) ([]tasks.DeliveryRecord, error) {
	out := make([]tasks.DeliveryRecord, 0, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	gates := map[string]gateReads{}
	var now *redis.TimeCmd
	if _, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		now = pl.Time(ctx)
		for i := range ids {
			cmds[i] = pl.HGetAll(ctx, p.keys.Delivery(subs[i], ids[i]))
			if _, ok := gates[subs[i]]; !ok {
				gates[subs[i]] = p.gateReadsIn(ctx, pl, subs[i])
			}
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) { // no cooldown key: Nil
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	for i := range ids {
		if r, ok := tasks.ParseDeliveryRecord(subs[i], ids[i], cmds[i].Val(), attempts); ok {
			showParked(&r, gates[subs[i]], now.Val())
			out = append(out, r)
		}
	}
	return out, nil
}

// EventRecord is a published event as kept for its payload retention,
// with its delivery to each subscriber it was published to.
type EventRecord struct {
	Event       tasks.Event            `json:"event"`
	PublishedAt time.Time              `json:"published_at"`
	Deliveries  []tasks.DeliveryRecord `json:"deliveries"`
}

// GetEvent returns event id and the state of its delivery to each
// subscriber it was published to (whose record is still kept), by
// subscriber id. Its cost grows with the event's subscribers only.
func (p *Producer) GetEvent(ctx context.Context, id string) (EventRecord, error) {
	if err := tasks.ValidateEventID(id); err != nil {
		return EventRecord{}, err
	}
	se, err := p.storedEvent(ctx, id)
	if err != nil {
		return EventRecord{}, err
	}
	ids := make([]string, len(se.Subscribers))
	for i := range ids {
		ids[i] = id
	}
	recs, err := p.readRecords(ctx, se.Subscribers, ids, false)
	for i := range recs {
		recs[i].SubscriberID = p.ext(recs[i].SubscriberID)
	}
	return EventRecord{Event: se.Event, PublishedAt: se.PublishedAt, Deliveries: recs}, err
}

// Resend sends event eventID to subscriber sub again, with the same
// webhook-id: a new series of attempts in the same delivery record, for a
// delivery that ended (delivered or dead; a dead one is replayed from the
// dead-letter ledger). It is refused with ErrDeliveryActive while the
// delivery is under way, and with ErrPayloadExpired once the event's
// payload is past its retention. A resend that failed to enqueue its task
// (an error, a crash) is finished by calling it again: the delivery booked
// and not in asynq is handed out again.
func (p *Producer) Resend(ctx context.Context, sub, eventID string) (Target, error) {
	rec, err := p.GetDelivery(ctx, sub, eventID)
	if err != nil {
		return Target{}, err
	}
	s, err := p.storedSubscriber(ctx, sub)
	if err != nil {
		return Target{}, err
	}
	taskID := tasks.TaskID(s.ID, eventID)
	switch rec.State {
	case tasks.StateDelivered:
	case tasks.StateDead:
		// Replayed from its ledger entry, if it has one (the entry is marked
		// replayed, its archived task freed).
		entries, err := p.readEntries(ctx, []string{taskID}, nil, DeadLetterQuery{IncludeReplayed: true})
		if err != nil {
			return Target{}, err
		}
		if len(entries) == 1 && entries[0].Event != nil {
			o := p.replayOne(ctx, entries[0], bookResend)
			t := Target{SubscriberID: sub, TaskID: p.extTask(o.TaskID), Outcome: o.Outcome, ProcessAt: o.ProcessAt, HeldReason: o.HeldReason}
			switch o.Outcome {
			case NotDead:
				return t, fmt.Errorf("%w: resend of %s to %s: %s", ErrDeliveryActive, eventID, sub, o.Error)
			case Failed:
				if entries[0].Gen != "" && entries[0].Gen != s.Gen {
					return t, fmt.Errorf("%w: resend of %s to %s: %s", ErrSubscriberRecreated, eventID, sub, o.Error)
				}
				return t, fmt.Errorf("%w: resend of %s to %s: %s", ErrRedisUnavailable, eventID, sub, o.Error)
			}
			return t, nil
		}
	case tasks.StatePending:
		// A resend whose task was never enqueued (its enqueue failed, or
		// was cut off), retried: handed out again.
		if t, ok, err := p.handOutAgain(ctx, s, eventID); err != nil || ok {
			return p.extTarget(t), err
		}
		fallthrough
	default:
		return Target{}, fmt.Errorf("%w: the delivery of %s to %s is %s: it is still being delivered, nothing is sent again",
			ErrDeliveryActive, eventID, sub, rec.State)
	}
	se, err := p.storedEvent(ctx, eventID)
	if errors.Is(err, ErrUnknownEvent) {
		return Target{}, fmt.Errorf("%w: event %s's payload is past its retention of %s: nothing left to send",
			ErrPayloadExpired, eventID, tasks.DurationWords(p.cfg.PayloadRetention))
	}
	if err != nil {
		return Target{}, err
	}
	res, err := p.fanOut(ctx, se.Event, nil, matched{subs: []tasks.Subscriber{s}}, bookResend)
	if err != nil {
		return Target{}, err
	}
	return p.extTarget(res.Targets[0]), nil
}

// handOutAgain hands out again subscriber s's delivery of event eventID
// when its record says it was handed out (pending in a lane, of s's
// generation, no run's) and asynq has no task waiting to run it: a resend or replay
// whose enqueue failed or was cut off, retried. The ready index is told
// first, at the hand-out lease's end, so that the delivery moves even if
// this enqueue fails too. ok is false, nothing done, when a task of it
// waits to run or the record says otherwise: the delivery is under way.
func (p *Producer) handOutAgain(ctx context.Context, s tasks.Subscriber, eventID string) (Target, bool, error) {
	v, err := p.rdb.HMGet(ctx, p.keys.Delivery(s.ID, eventID), "g", "s", "q", "tk").Result()
	if err != nil {
		return Target{}, false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	gen, _ := v[0].(string)
	state, _ := v[1].(string)
	lane, _ := v[2].(string)
	owner, _ := v[3].(string) // a run has it (waiting for its rate slot)
	if gen != s.Gen || state != tasks.StatePending || owner != "" || (lane != limits.WhereFresh && lane != limits.WhereBacklog) {
		return Target{}, false, nil
	}
	shards, err := p.shards(ctx)
	if err != nil {
		return Target{}, false, err
	}
	t := Target{SubscriberID: s.ID, TaskID: tasks.TaskID(s.ID, eventID), Outcome: Enqueued}
	leaseEnd := p.nowFunc().Add(limits.OutLease)
	if err := p.gates.Notify(ctx, p.keys.Ready(s.Region), s.ID, leaseEnd); err != nil {
		return t, false, fmt.Errorf("%w: subscriber %s: %v", ErrRedisUnavailable, s.ID, err)
	}
	switch h, err := p.handOut(ctx, s, eventID, lane, shards, true); {
	case err != nil:
		t.Outcome, t.Err = Failed, err
		return t, true, err
	case h == handedPresent:
		return Target{}, false, nil
	case h == handedBusy: // nothing enqueued: the turn at the lease's end does it
		t.Outcome, t.ProcessAt = Scheduled, limits.CeilSecond(leaseEnd).UTC()
	}
	res := &PublishResult{Targets: []Target{t}}
	err = p.waitReplicas(ctx, res)
	return res.Targets[0], true, err
}
