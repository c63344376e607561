package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// DeadLetterQuery selects dead letters. Zero fields do not filter.
type DeadLetterQuery struct {
	Subscriber string
	Since      time.Time // dead at or after
	Until      time.Time // dead before
	IDs        []string  // task ids ("<subscriber>:<event>"); when set, the other filters still apply
	// IncludeReplayed also returns entries already replayed.
	IncludeReplayed bool
	// Limit caps the result; default 100, at most 10,000. Replay ignores it
	// and works through every match.
	Limit int
}

const maxPage = 10_000

// DeadLetters returns matching ledger entries, newest first, with their
// attempts.
func (p *Producer) DeadLetters(ctx context.Context, q DeadLetterQuery) ([]tasks.DeadLetter, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	out, _, err := p.deadPage(ctx, q, min(limit, maxPage), "+inf")
	return out, err
}

// deadPage returns up to n entries dead before max (a ZSET score bound) and
// the bound to continue from ("" when there are no more).
func (p *Producer) deadPage(ctx context.Context, q DeadLetterQuery, n int, max string) ([]tasks.DeadLetter, string, error) {
	var ids []string
	next := ""
	if len(q.IDs) > 0 {
		if max != "+inf" {
			return nil, "", nil
		}
		ids = q.IDs
	} else {
		index := p.keys.DeadIndex()
		if q.Subscriber != "" {
			index = p.keys.DeadBySubscriber(q.Subscriber)
		}
		if !q.Until.IsZero() && max == "+inf" {
			max = "(" + strconv.FormatInt(q.Until.UnixMilli(), 10)
		}
		minScore := "-inf"
		if !q.Since.IsZero() {
			minScore = strconv.FormatInt(q.Since.UnixMilli(), 10)
		}
		zs, err := p.rdb.ZRevRangeByScoreWithScores(ctx, index, &redis.ZRangeBy{Max: max, Min: minScore, Count: int64(n)}).Result()
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		for _, z := range zs {
			ids = append(ids, z.Member.(string))
		}
		if len(zs) == n {
			// Entries sharing the last score are re-read; callers skip
			// duplicates by task id.
			next = strconv.FormatFloat(zs[len(zs)-1].Score, 'f', 0, 64)
		}
	}
	entries := make([]*redis.StringCmd, len(ids))
	attempts := make([]*redis.StringSliceCmd, len(ids))
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, id := range ids {
			entries[i] = pl.Get(ctx, p.keys.DeadLetter(id))
			attempts[i] = pl.LRange(ctx, p.keys.Attempts(id), 0, -1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	out := make([]tasks.DeadLetter, 0, len(ids))
	for i := range ids {
		if entries[i].Err() != nil {
			continue // expired past its retention, or never dead
		}
		var e tasks.DeadLetter
		if err := json.Unmarshal([]byte(entries[i].Val()), &e); err != nil {
			continue
		}
		if (q.Subscriber != "" && e.SubscriberID != q.Subscriber) || (!q.IncludeReplayed && !e.ReplayedAt.IsZero()) ||
			(!q.Since.IsZero() && e.DeadAt.Before(q.Since)) || (!q.Until.IsZero() && !e.DeadAt.Before(q.Until)) {
			continue
		}
		for _, a := range attempts[i].Val() {
			var at tasks.Attempt
			if json.Unmarshal([]byte(a), &at) == nil {
				e.Attempts = append(e.Attempts, at)
			}
		}
		out = append(out, e)
	}
	return out, next, nil
}

// ReplayOutcome is what Replay did with one dead letter.
type ReplayOutcome struct {
	TaskID  string  `json:"task_id"`
	Outcome Outcome `json:"outcome"` // enqueued, duplicate (already queued or delivered), failed
	Error   string  `json:"error,omitempty"`
}

// Replay re-enqueues every matching dead letter that has not been replayed,
// with the same event id (so receivers still dedupe on webhook-id), fresh
// attempts and a fresh retry horizon, and marks it replayed. An entry whose
// subscriber was deleted or whose payload was unreadable is reported failed
// and left as it is. Replay is safe to repeat.
func (p *Producer) Replay(ctx context.Context, q DeadLetterQuery) ([]ReplayOutcome, error) {
	q.IncludeReplayed = false
	var out []ReplayOutcome
	seen := map[string]bool{}
	var errs []error
	for max := "+inf"; max != ""; {
		page, next, err := p.deadPage(ctx, q, 1000, max)
		if err != nil {
			return out, err
		}
		if next == max { // a full page of one millisecond: step past it
			next = "(" + next
		}
		max = next
		for _, e := range page {
			if seen[e.TaskID] {
				continue
			}
			seen[e.TaskID] = true
			o := p.replayOne(ctx, e)
			if o.Outcome == Failed {
				errs = append(errs, fmt.Errorf("%s: %s", o.TaskID, o.Error))
			}
			out = append(out, o)
		}
	}
	return out, errors.Join(errs...)
}

func (p *Producer) replayOne(ctx context.Context, e tasks.DeadLetter) ReplayOutcome {
	o := ReplayOutcome{TaskID: e.TaskID, Outcome: Failed}
	if e.Event == nil {
		o.Error = "payload unreadable; cannot replay"
		return o
	}
	s, err := p.GetSubscriber(ctx, e.SubscriberID)
	if err != nil {
		o.Error = err.Error()
		return o
	}
	// The archived task holds the id; free it (it may already be trimmed).
	if err := p.inspector.DeleteTask(p.cfg.Namespace, e.TaskID); err != nil &&
		!errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		o.Error = fmt.Sprintf("freeing the archived task: %v", err)
		return o
	}
	res, err := p.fanOut(ctx, *e.Event, nil, []tasks.Subscriber{s})
	if err != nil {
		o.Error = err.Error()
		return o
	}
	o.Outcome = res.Targets[0].Outcome
	e.ReplayedAt = time.Now()
	e.Attempts = nil
	b, _ := json.Marshal(e)
	if err := p.rdb.Set(ctx, p.keys.DeadLetter(e.TaskID), b, redis.KeepTTL).Err(); err != nil {
		// Enqueued but not marked: a second replay reports a duplicate.
		o.Error = "replayed, but not marked: " + err.Error()
	}
	return o
}

// DeleteDeadLetter removes a ledger entry (not the asynq archive's copy).
func (p *Producer) DeleteDeadLetter(ctx context.Context, taskID string) error {
	e, _, err := p.deadPage(ctx, DeadLetterQuery{IDs: []string{taskID}, IncludeReplayed: true}, 1, "+inf")
	if err != nil {
		return err
	}
	if len(e) == 0 {
		return fmt.Errorf("%w: no dead letter %s", ErrUnknownDeadLetter, taskID)
	}
	_, err = p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Del(ctx, p.keys.DeadLetter(taskID), p.keys.Attempts(taskID))
		pl.ZRem(ctx, p.keys.DeadIndex(), taskID)
		pl.ZRem(ctx, p.keys.DeadBySubscriber(e[0].SubscriberID), taskID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}
