package producer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// A subscriber is stored in two places (see tasks.Keys): its configuration
// and index entries in the directory, changed together in one transaction
// so Publish never misses it; and its gate record (generation, pause) in
// the subscriber's own slot, which every delivery reads fresh. The record
// is written after the directory on creation and removed after it on
// deletion, so a half-done change makes deliveries fail safe (refused) and
// the next Put repairs it.

// PutSubscriber creates or replaces a subscriber and returns it as stored,
// with defaults filled. When s has no secrets, a replaced subscriber keeps
// its secrets (so changing a URL does not break the receiver's
// verification) and a new one gets a generated secret. s.Paused applies
// to a new subscriber only: an existing one keeps its pause, whoever set
// it, until SetPaused changes it.
func (p *Producer) PutSubscriber(ctx context.Context, s tasks.Subscriber) (tasks.Subscriber, error) {
	s, _, err := p.UpsertSubscriber(ctx, s)
	return s, err
}

// UpsertSubscriber is PutSubscriber that also reports whether the
// subscriber was created (true) or replaced.
func (p *Producer) UpsertSubscriber(ctx context.Context, s tasks.Subscriber) (tasks.Subscriber, bool, error) {
	keep := len(s.Secrets) == 0
	// Validate before touching Redis: a refused call writes nothing and
	// says why even while Redis is down.
	s, err := s.WithDefaults()
	if err != nil {
		return s, false, err
	}
	s.Retiring = pruneRetiring(s.Retiring, p.nowFunc())
	if err := s.Validate(); err != nil {
		return s, false, err
	}
	pause := s.Paused
	var old tasks.Subscriber
	var found bool
	err = p.updateSubscriber(ctx, s.ID, func(cur tasks.Subscriber, ok bool) (tasks.Subscriber, error) {
		old, found = cur, ok
		if ok {
			s.Gen = cur.Gen
			if keep {
				s.Secrets, s.Retiring = cur.Secrets, pruneRetiring(cur.Retiring, p.nowFunc())
			}
		} else {
			s.Gen = newGen()
		}
		return s, nil
	})
	if err != nil {
		return s, false, err
	}
	if err := p.writeRecord(ctx, s, !found && pause); err != nil {
		return s, false, err
	}
	if found && old.Limit != s.Limit {
		// The limiter and the pacing cursor remember the old pace, and the
		// waiting tasks were booked on it: start over, and wake them so
		// they are paced anew.
		if err := p.resetPace(ctx, s.ID); err != nil {
			return s, false, err
		}
	}
	stored, err := p.GetSubscriber(ctx, s.ID)
	if err != nil {
		return s, false, err
	}
	return stored, !found, nil
}

func newGen() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// updateSubscriber runs a read-modify-write of one subscriber's
// configuration as an optimistic transaction: change gets the current
// configuration (ok false: none) and returns the new one, which is written
// with its index entries; a concurrent change makes it start over.
func (p *Producer) updateSubscriber(ctx context.Context, id string, change func(cur tasks.Subscriber, ok bool) (tasks.Subscriber, error)) error {
	var changeErr error
	for range 20 {
		err := p.rdb.Watch(ctx, func(tx *redis.Tx) error {
			cur, ok, err := p.readConfig(ctx, tx, id)
			if err != nil {
				changeErr = err
				return err
			}
			next, err := change(cur, ok)
			if err != nil {
				changeErr = err
				return err
			}
			b, _ := json.Marshal(next) // plain data: cannot fail
			_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
				pl.HSet(ctx, p.keys.SubscriberConfigs(), id, b)
				pl.Incr(ctx, p.keys.SubscriberVersion(id))
				pl.ZAdd(ctx, p.keys.SubscriberIDs(), redis.Z{Member: id})
				if next.Metrics {
					pl.ZAdd(ctx, p.keys.MetricsIndex(), redis.Z{Member: id})
				} else if ok && cur.Metrics {
					pl.ZRem(ctx, p.keys.MetricsIndex(), id)
				}
				if next.Region != "" {
					pl.SAdd(ctx, p.keys.Regions(), next.Region)
				}
				for _, f := range filterKeys(p.keys, next.EventTypes) {
					pl.SAdd(ctx, f, id)
				}
				if ok {
					for _, f := range filterKeys(p.keys, cur.EventTypes) {
						if !slices.Contains(filterKeys(p.keys, next.EventTypes), f) {
							pl.SRem(ctx, f, id)
						}
					}
				}
				return nil
			})
			return err
		}, p.keys.SubscriberVersion(id))
		switch {
		case err == nil:
			return nil
		case changeErr != nil:
			return changeErr
		case !errors.Is(err, redis.TxFailedErr):
			return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
	}
	return fmt.Errorf("%w: subscriber %s kept changing during the update; try again", ErrRedisUnavailable, id)
}

// filterKeys are the index sets a subscriber with these filters is in.
func filterKeys(k tasks.Keys, types []string) []string {
	if len(types) == 0 {
		return []string{k.AnyIndex()}
	}
	out := make([]string, 0, len(types))
	for _, t := range types {
		if f := k.IndexKeyOf(t); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// readConfig reads one stored configuration.
func (p *Producer) readConfig(ctx context.Context, c redis.Cmdable, id string) (tasks.Subscriber, bool, error) {
	var s tasks.Subscriber
	v, err := c.HGet(ctx, p.keys.SubscriberConfigs(), id).Result()
	if errors.Is(err, redis.Nil) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, false, fmt.Errorf("subscriber %s: stored value unreadable: %w", id, err)
	}
	return s, true, nil
}

// writeRecord writes the gate record's generation (repairing a record a
// crash left out) and, for a new subscriber created paused, the pause.
func (p *Producer) writeRecord(ctx context.Context, s tasks.Subscriber, pause bool) error {
	rec := p.keys.Gate(s.ID)
	_, err := p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.HSet(ctx, rec, "gen", s.Gen)
		if pause {
			pl.HSet(ctx, rec, "paused", tasks.PauseOperator, "paused_at", p.nowFunc().UnixMilli())
		}
		return nil
	})
	if err == nil && pause {
		err = p.listPaused(ctx, s.ID, true)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// listPaused adds subscriber id to the paused index, or removes it: only
// /metrics' count reads it, the gate record holds the pause. Another slot
// than the record's, so written just after it.
func (p *Producer) listPaused(ctx context.Context, id string, paused bool) error {
	if paused {
		return p.rdb.SAdd(ctx, p.keys.PausedIndex(), id).Err()
	}
	return p.rdb.SRem(ctx, p.keys.PausedIndex(), id).Err()
}

// GetSubscriber returns ErrUnknownSubscriber when there is none with id.
func (p *Producer) GetSubscriber(ctx context.Context, id string) (tasks.Subscriber, error) {
	if err := tasks.ValidateSubscriberID(id); err != nil {
		return tasks.Subscriber{}, err
	}
	subs, err := p.subscribers(ctx, []string{id})
	if err != nil {
		return tasks.Subscriber{}, err
	}
	if len(subs) == 0 {
		return tasks.Subscriber{}, fmt.Errorf("%w: %s", ErrUnknownSubscriber, id)
	}
	return subs[0], nil
}

// subscribers reads the subscribers with these ids, with their gate
// records, in two round trips; unknown ids are left out.
func (p *Producer) subscribers(ctx context.Context, ids []string) ([]tasks.Subscriber, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	vals, err := p.rdb.HMGet(ctx, p.keys.SubscriberConfigs(), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	out := make([]tasks.Subscriber, 0, len(ids))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		var s tasks.Subscriber
		if err := json.Unmarshal([]byte(str), &s); err != nil {
			p.cfg.Logger.Error("skipping unreadable subscriber", "subscriber_id", ids[i], "err", err)
			continue
		}
		out = append(out, s)
	}
	recs := make([]*redis.SliceCmd, len(out))
	_, err = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, s := range out {
			recs[i] = pl.HMGet(ctx, p.keys.Gate(s.ID), "paused", "paused_at")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	for i := range out {
		v := recs[i].Val()
		if reason, ok := v[0].(string); ok {
			out[i].Paused, out[i].PauseReason = true, reason
			if ms, err := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64); err == nil {
				out[i].PausedAt = time.UnixMilli(ms).UTC()
			}
		}
	}
	return out, nil
}

// ListSubscribers returns every subscriber, in id order. It reads them all:
// for many, page through them with Subscribers.
func (p *Producer) ListSubscribers(ctx context.Context) ([]tasks.Subscriber, error) {
	var all []tasks.Subscriber
	for after := ""; ; {
		page, next, err := p.Subscribers(ctx, after, 1000)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		after = next
	}
}

// Subscribers returns up to limit subscribers with ids after after, in id
// order, and the id to continue after ("" at the end). Its cost depends on
// limit, not on how many subscribers there are.
func (p *Producer) Subscribers(ctx context.Context, after string, limit int) ([]tasks.Subscriber, string, error) {
	limit = min(max(limit, 1), maxPage)
	lo := "-"
	if after != "" {
		lo = "(" + after
	}
	ids, err := p.rdb.ZRangeByLex(ctx, p.keys.SubscriberIDs(), &redis.ZRangeBy{Min: lo, Max: "+", Count: int64(limit)}).Result()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	subs, err := p.subscribers(ctx, ids)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ids) == limit {
		next = ids[len(ids)-1]
	}
	return subs, next, nil
}

// DeleteSubscriber removes a subscriber and its gate state. Its queued
// events are dropped when they come due (counted, not sent, not
// dead-lettered), also when a subscriber of the same id is created
// meanwhile: that one is a new generation.
func (p *Producer) DeleteSubscriber(ctx context.Context, id string) error {
	if err := tasks.ValidateSubscriberID(id); err != nil {
		return err
	}
	err := p.rdb.Watch(ctx, func(tx *redis.Tx) error {
		cur, ok, err := p.readConfig(ctx, tx, id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %s", ErrUnknownSubscriber, id)
		}
		// The release before's copy first, if a rolling upgrade left one: a
		// task of its queue would carry the subscriber over again
		// (MigrateSubscriber). Another slot: not in the transaction.
		if err := p.rdb.HDel(ctx, p.keys.V1().Subscribers(), id).Err(); err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			pl.HDel(ctx, p.keys.SubscriberConfigs(), id)
			pl.Incr(ctx, p.keys.SubscriberVersion(id))
			pl.ZRem(ctx, p.keys.SubscriberIDs(), id)
			pl.ZRem(ctx, p.keys.MetricsIndex(), id)
			pl.SRem(ctx, p.keys.PausedIndex(), id)
			pl.SRem(ctx, p.keys.OpenBreakers(), id)
			for _, f := range filterKeys(p.keys, cur.EventTypes) {
				pl.SRem(ctx, f, id)
			}
			return nil
		})
		return err
	}, p.keys.SubscriberVersion(id))
	if errors.Is(err, ErrUnknownSubscriber) || errors.Is(err, ErrRedisUnavailable) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	k := p.keys.Gates(id)
	_, err = p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		// Its delivery records expire by themselves; the log that lists
		// them goes now, so that a subscriber created again with this id
		// starts an empty one.
		pl.Del(ctx, k.Record, p.keys.Stats(id), p.keys.DeadBatch(id), p.keys.DeadBatchSample(id), k.Log)
		p.gates.Forget(ctx, pl, k)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// SetPaused pauses (reason "operator") or resumes a subscriber, whoever
// paused it. A paused subscriber gets no new events from Publish and its
// queued events are held; resuming wakes them.
func (p *Producer) SetPaused(ctx context.Context, id string, paused bool) error {
	if _, err := p.GetSubscriber(ctx, id); err != nil {
		return err
	}
	rec := p.keys.Gate(id)
	var err error
	if paused {
		err = p.rdb.HSet(ctx, rec, "paused", tasks.PauseOperator, "paused_at", p.nowFunc().UnixMilli()).Err()
	} else {
		err = p.rdb.HDel(ctx, rec, "paused", "paused_at").Err()
	}
	if err == nil {
		err = p.listPaused(ctx, id, paused)
	}
	if err == nil && !paused {
		_, err = p.wake(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// resetPace forgets a subscriber's old pace and wakes its waiting tasks.
func (p *Producer) resetPace(ctx context.Context, id string) error {
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		p.gates.ResetPace(ctx, pl, p.keys.Gates(id))
		return nil
	})
	if err == nil {
		_, err = p.wake(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// WakeMembers makes the given waiting-index entries of the subscriber due
// now (the worker wakes the tasks a breaker held this way, a few at a
// time, from a list it took with Gates.WaitingAll when the breaker
// closed). It returns how many it woke and the entries whose tasks are
// running or pending (busy): a task may be on its way back to the
// schedule, so the caller looks at those again. Entries no longer parked
// leave the index, unless parked anew since they were read.
func (p *Producer) WakeMembers(ctx context.Context, id string, entries []redis.Z) (woken int, busy []redis.Z, err error) {
	if woken, busy, err = p.wakeEntries(ctx, id, entries); err != nil {
		err = fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return woken, busy, err
}

// wakeEntries is WakeMembers with Redis' own errors.
func (p *Producer) wakeEntries(ctx context.Context, id string, entries []redis.Z) (woken int, busy []redis.Z, err error) {
	var done []redis.Z
	for _, z := range entries {
		m, _ := z.Member.(string)
		switch st, err := p.wakeOne(m); {
		case err != nil:
			return woken, busy, err
		case st == wakeBusy:
			busy = append(busy, z)
		case st == wakeDone:
			woken++
			done = append(done, z)
		default:
			done = append(done, z)
		}
	}
	return woken, busy, p.gates.Unpark(ctx, p.keys.Gates(id), done)
}

// wakeResult is what wakeOne did with a waiting-index member.
type wakeResult int

const (
	wakeGone wakeResult = iota // not parked any more (finished, dead, unreadable)
	wakeBusy                   // running or pending: it parks itself again if it must
	wakeDone                   // was parked: made due now
)

// wakeOne makes the task of waiting-index member m due now if it waits in
// asynq's schedule. RunTask would also revive an archived (dead) task, so
// the state is checked first.
func (p *Producer) wakeOne(m string) (wakeResult, error) {
	queue, tid, ok := tasks.SplitWaitingMember(m)
	if !ok {
		return wakeGone, nil
	}
	info, err := p.inspector.GetTaskInfo(queue, tid)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return wakeGone, nil
	case err != nil:
		return wakeGone, err
	case info.State == asynq.TaskStateActive || info.State == asynq.TaskStatePending:
		return wakeBusy, nil
	case info.State != asynq.TaskStateScheduled && info.State != asynq.TaskStateRetry:
		return wakeGone, nil
	}
	if err := p.inspector.RunTask(queue, tid); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return wakeGone, err
	}
	return wakeDone, nil
}

// wake makes every task of the subscriber parked in asynq's schedule due
// now, so that it passes the gates again under the current limit and pause,
// and returns how many it woke. It works from a snapshot of the waiting
// index, so a woken task parked anew (throttled again) is not chased. A task
// that is no longer parked (finished, dead) leaves the index. One that is
// running or pending keeps its entry: it may be on its way back to the
// schedule (a deferral whose wake-up Admit wrote just before asynq moves
// the task), and without the entry a later wake would miss it.
func (p *Producer) wake(ctx context.Context, id string) (int, error) {
	all, err := p.gates.WaitingAll(ctx, p.keys.Gates(id))
	woken := 0
	for len(all) > 0 && err == nil {
		var got int
		n := min(len(all), 500)
		got, _, err = p.wakeEntries(ctx, id, all[:n])
		woken, all = woken+got, all[n:]
	}
	return woken, err
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
