package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// writeDeadLetter writes the ledger entry of a dead run, before asynq
// archives it: the global index first (a member whose entry is missing is
// dropped by readers), then, in one transaction in the subscriber's slot,
// the run's outcome (slot release, attempt, counters), the entry, its
// attempts made to live as long as it does, the subscriber's index, and the
// task's removal from the waiting index. fields are the run's counters.
func (h *handler) writeDeadLetter(ctx context.Context, r *run, err error, fields []string) error {
	now := time.Now()
	e := tasks.DeadLetter{TaskID: r.taskID, Queue: r.queue, SubscriberID: r.sub, Reason: DeadUndecodable, Error: err.Error(), DeadAt: now}
	var dl *deadLetter
	if errors.As(err, &dl) {
		e.Reason = dl.reason
	}
	if ev, ok := r.wholeEvent(); ok {
		e.Event = ev
	} else { // unreadable, or its stored event gone: the entry keeps what the task held
		e.Payload = string(r.payload)
	}
	b, _ := json.Marshal(e)
	lk := h.keys.Ledger(r.taskID)
	z := redis.Z{Score: float64(now.UnixMilli()), Member: r.taskID}
	retention := h.cfg.DeadLetterRetention
	if _, perr := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, h.keys.AllDeadIndex(), z)
		if retention > 0 {
			p.ZRemRangeByScore(ctx, h.keys.AllDeadIndex(), "-inf", strconv.FormatInt(now.Add(-retention).UnixMilli(), 10))
		}
		return nil
	}); perr != nil {
		return perr
	}
	var incs []increment
	r.logFull = true // in a transaction: no second chance for a script Redis does not know
	_, perr := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if r.sub != "" {
			// First, so that the ledger's own ttl (below) is the one kept
			// on the attempt list, not a retrying task's.
			h.count(ctx, p, r, fields, direct(ctx, p, &incs))
			h.gates.UnparkIn(ctx, p, r.keys, r.member)
			h.leftFresh(ctx, p, r)
		}
		p.Set(ctx, lk.Entry, b, retention)
		if retention > 0 {
			p.Expire(ctx, lk.Attempts, retention)
			p.ZRemRangeByScore(ctx, lk.Index, "-inf", strconv.FormatInt(now.Add(-retention).UnixMilli(), 10))
		} else {
			p.Persist(ctx, lk.Attempts)
		}
		p.ZAdd(ctx, lk.Index, z)
		if r.sub != "" && r.d != nil && !tasks.IsOperatorType(r.d.Event.Type) {
			h.batchDead(ctx, p, r.sub, r.d.Event.ID, e.Reason)
		}
		return nil
	})
	if perr != nil {
		return perr
	}
	if r.sub != "" && r.d != nil && !tasks.IsOperatorType(r.d.Event.Type) {
		// After the batch, so a worker reporting it finds it there; another
		// slot, so not in the transaction. If lost, the next dead letter
		// writes it again.
		h.dueDead(ctx, r.sub)
	}
	if r.sub == "" {
		// A payload that names no subscriber still counts in the totals.
		for _, f := range fields {
			h.totals.add(f, 1)
		}
	}
	h.totals.addAll(incs)
	return nil
}

// wholeEvent is the run's event with its data, for a dead letter: the
// task's own, or the stored one it refers to, if it was read.
func (r *run) wholeEvent() (*tasks.Event, bool) {
	switch {
	case r.d == nil:
		return nil, false
	case !r.d.PayloadRef:
		return &r.d.Event, true
	case r.body == nil:
		return nil, false
	}
	var ev tasks.Event
	if json.Unmarshal(r.body, &ev) != nil {
		return nil, false
	}
	return &ev, true
}
