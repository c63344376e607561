package producer

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	// Limit caps a page: default 100, at most 10,000 (Replay: default
	// 1,000 per call).
	Limit int
	// Cursor continues where the page that returned it ended ("": from
	// the newest). Opaque.
	Cursor string
}

const maxPage = 10_000

// ErrBadCursor: a cursor that no page returned.
var ErrBadCursor = errors.New("bad cursor")

// DeadLetters returns a page of matching ledger entries, newest first, with
// their attempts, and the cursor of the next page ("" when there is none).
// A page may hold fewer than Limit entries (even none) and still have a
// next one: filters apply to what the index holds, and a page reads at most
// ten times Limit index entries, so that its cost stays bounded however many
// entries the filters skip.
func (p *Producer) DeadLetters(ctx context.Context, q DeadLetterQuery) ([]tasks.DeadLetter, string, error) {
	out, next, err := p.deadPage(ctx, q, cmpLimit(q.Limit, 100))
	for i := range out {
		out[i].TaskID, out[i].SubscriberID = p.extTask(out[i].TaskID), p.ext(out[i].SubscriberID)
	}
	return out, next, err
}

func cmpLimit(n, def int) int {
	if n <= 0 {
		return def
	}
	return min(n, maxPage)
}

// position is a place in an index: entries older than it come next.
type position struct {
	score  int64  // Unix ms
	member string // task id; among equal scores, members sort descending
}

func (c position) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.score, 10) + ":" + c.member))
}

func decodeCursor(s string) (position, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return position{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	score, member, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(score, 10, 64)
	if !ok || err != nil {
		return position{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return position{n, member}, nil
}

// deadPage is a page of p's dead letters matching q (its subscriber and
// task ids p's), as stored.
func (p *Producer) deadPage(ctx context.Context, q DeadLetterQuery, n int) ([]tasks.DeadLetter, string, error) {
	if q.Subscriber != "" {
		q.Subscriber = p.sid(q.Subscriber)
	}
	if len(q.IDs) > 0 && p.tenant != "" {
		ids := make([]string, len(q.IDs))
		for i, id := range q.IDs {
			ids[i] = p.storedTask(id)
		}
		q.IDs = ids
	}
	if len(q.IDs) > 0 {
		if len(q.IDs) > maxPage {
			return nil, "", &tasks.FieldError{Field: "ids", Msg: fmt.Sprintf("at most %d", maxPage)}
		}
		out, err := p.readEntries(ctx, q.IDs, nil, q)
		return out, "", err
	}
	var from *position
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor)
		if err != nil {
			return nil, "", err
		}
		from = &c
	}
	index := p.keys.AllDeadIndex()
	if q.Subscriber != "" {
		index = p.keys.DeadIndex(q.Subscriber)
	}
	var out []tasks.DeadLetter
	budget := 10 * n
	for len(out) < n && budget > 0 {
		ids, scores, last, more, err := p.indexRange(ctx, index, q, from, min(n-len(out), budget))
		if err != nil {
			return nil, "", err
		}
		budget -= len(ids)
		entries, err := p.readEntries(ctx, ids, scores, q)
		if err != nil {
			return nil, "", err
		}
		out = append(out, entries...)
		if !more {
			return out, "", nil
		}
		from = &last
	}
	return out, from.encode(), nil
}

// indexRange reads up to n task ids of index older than from (nil: the
// newest), within q's time range, with their scores. more reports whether
// the index may hold further ones; last is the position of the last id read.
func (p *Producer) indexRange(ctx context.Context, index string, q DeadLetterQuery, from *position, n int) (ids []string, scores []int64, last position, more bool, err error) {
	maxS, minS := "+inf", "-inf"
	if !q.Until.IsZero() {
		maxS = "(" + strconv.FormatInt(q.Until.UnixMilli(), 10)
	}
	if !q.Since.IsZero() {
		minS = strconv.FormatInt(q.Since.UnixMilli(), 10)
	}
	skip := 0
	if from != nil {
		maxS = strconv.FormatInt(from.score, 10) // below Until: it was read from the range
		// Entries at from's score that sort after from.member were read
		// already: count them to skip.
		same, err := p.rdb.ZRevRangeByScore(ctx, index, &redis.ZRangeBy{Max: maxS, Min: maxS}).Result()
		if err != nil {
			return nil, nil, last, false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		for _, m := range same {
			if m >= from.member {
				skip++
			}
		}
	}
	zs, err := p.rdb.ZRevRangeByScoreWithScores(ctx, index, &redis.ZRangeBy{Max: maxS, Min: minS, Offset: int64(skip), Count: int64(n)}).Result()
	if err != nil {
		return nil, nil, last, false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	for _, z := range zs {
		ids = append(ids, z.Member.(string))
		scores = append(scores, int64(z.Score))
	}
	if len(zs) > 0 {
		z := zs[len(zs)-1]
		last = position{int64(z.Score), z.Member.(string)}
	}
	return ids, scores, last, len(zs) == n, nil
}

// indexGrace is how old an index member must be before a reader that finds
// no ledger entry for it drops it: the worker adds the member to the
// global index just before it writes the entry.
const indexGrace = time.Minute

// readEntries reads the ledger entries of ids that match q, with their
// attempts. An index member (scores: its index scores, nil when the ids
// were not read from an index) whose ledger entry is gone (past its
// retention, deleted) is dropped from the indexes.
func (p *Producer) readEntries(ctx context.Context, ids []string, scores []int64, q DeadLetterQuery) ([]tasks.DeadLetter, error) {
	entries := make([]*redis.StringCmd, len(ids))
	attempts := make([]*redis.StringSliceCmd, len(ids))
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, id := range ids {
			lk := p.keys.Ledger(id)
			entries[i] = pl.Get(ctx, lk.Entry)
			attempts[i] = pl.LRange(ctx, lk.Attempts, 0, -1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	out := make([]tasks.DeadLetter, 0, len(ids))
	var gone []string
	old := p.nowFunc().Add(-indexGrace).UnixMilli()
	for i, id := range ids {
		if entries[i] == nil || entries[i].Err() != nil {
			if scores != nil && scores[i] < old {
				gone = append(gone, id)
			}
			continue
		}
		e, ok := tasks.ParseLedger(entries[i].Val(), attempts[i].Val())
		if !ok {
			continue
		}
		if !p.owns(e.SubscriberID) || (q.Subscriber != "" && e.SubscriberID != q.Subscriber) || (!q.IncludeReplayed && !e.ReplayedAt.IsZero()) ||
			(!q.Since.IsZero() && e.DeadAt.Before(q.Since)) || (!q.Until.IsZero() && !e.DeadAt.Before(q.Until)) {
			continue
		}
		out = append(out, e)
	}
	if len(gone) > 0 {
		p.dropFromIndexes(ctx, gone)
	}
	return out, nil
}

// dropFromIndexes removes task ids whose ledger entry is gone.
func (p *Producer) dropFromIndexes(ctx context.Context, ids []string) {
	_, _ = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, id := range ids {
			pl.ZRem(ctx, p.keys.AllDeadIndex(), id)
			pl.ZRem(ctx, p.keys.Ledger(id).Index, id)
		}
		return nil
	})
}

// ReplayOutcome is what Replay did with one dead letter.
type ReplayOutcome struct {
	TaskID string `json:"task_id"`
	// Outcome: enqueued, scheduled or held, as a publish's (Target);
	// duplicate (already queued again, or another replay of it is under
	// way: it books it once); not_dead (the task is queued, running or
	// delivered: the entry was stale, and nothing is sent again); failed
	// (see Error).
	Outcome Outcome `json:"outcome"`
	// ProcessAt and HeldReason are the publish's (Target): a replay into
	// a paused subscriber, an open breaker or a cooldown is held, not sent.
	ProcessAt  time.Time `json:"process_at,omitzero"`
	HeldReason string    `json:"held_reason,omitempty"`
	Error      string    `json:"error,omitempty"`
}

// NotDead is the outcome of replaying an entry whose task is not dead.
const NotDead Outcome = "not_dead"

// Replay re-enqueues up to Limit (default 1,000) matching dead letters
// that have not been replayed, newest first, with the same event id (so
// receivers still dedupe on webhook-id), a fresh attempt list and a fresh
// retry horizon, marks each replayed, and returns the cursor to continue
// from ("" when done).
//
// Only a task that is really dead is sent again: archived in asynq, or
// gone from it. An entry whose task is queued, running or delivered (the
// ledger is written before asynq archives: a worker that died between the
// two left the task to be retried) is reported not_dead and left; the
// delivery clears it. An entry whose subscriber was deleted or whose
// payload was unreadable is reported failed and left as it is.
//
// Each entry is marked as soon as it is enqueued, so a replay cut off
// halfway (a timeout, a crash) is finished by running the same query again:
// what was replayed is skipped, and what was booked but not enqueued (its
// enqueue failed) is handed out.
func (p *Producer) Replay(ctx context.Context, q DeadLetterQuery) ([]ReplayOutcome, string, error) {
	q.IncludeReplayed = false
	page, next, err := p.deadPage(ctx, q, cmpLimit(q.Limit, 1000))
	if err != nil {
		return nil, "", err
	}
	out := make([]ReplayOutcome, 0, len(page))
	var errs []error
	for _, e := range page {
		o := p.replayOne(ctx, e, bookResend)
		o.TaskID = p.extTask(o.TaskID)
		if o.Outcome == Failed {
			errs = append(errs, fmt.Errorf("%s: %s", o.TaskID, o.Error))
		}
		out = append(out, o)
	}
	return out, next, errors.Join(errs...)
}

// ReplayAll runs Replay until every match is done.
func (p *Producer) ReplayAll(ctx context.Context, q DeadLetterQuery) ([]ReplayOutcome, error) {
	var all []ReplayOutcome
	var errs []error
	for {
		out, next, err := p.Replay(ctx, q)
		all = append(all, out...)
		if err != nil {
			if errors.Is(err, ErrRedisUnavailable) || errors.Is(err, ErrBadCursor) {
				return all, err
			}
			errs = append(errs, err)
		}
		if next == "" {
			return all, errors.Join(errs...)
		}
		q.Cursor = next
	}
}

// replayOne replays dead letter e, booked how (bookResend, or bookRun
// from the run of its own task).
func (p *Producer) replayOne(ctx context.Context, e tasks.DeadLetter, how booking) ReplayOutcome {
	o := ReplayOutcome{TaskID: e.TaskID, Outcome: Failed}
	if e.Event == nil {
		o.Error = "payload unreadable; cannot replay"
		return o
	}
	s, err := p.storedByID(ctx, e.SubscriberID)
	if err != nil {
		o.Error = err.Error()
		return o
	}
	if e.Gen != "" && e.Gen != s.Gen {
		o.Error = fmt.Sprintf("%v: subscriber %s was deleted and created again since this dead letter (generation %s, now %s): "+
			"its event is not sent to the new endpoint; publish it again to send it", ErrSubscriberRecreated, p.ext(s.ID), e.Gen, s.Gen)
		return o
	}
	c, o, ok := p.claimReplay(ctx, e)
	if !ok {
		return o
	}
	o, marked := p.replayClaimed(ctx, e, s, &c, how)
	if err := p.endReplay(ctx, c, marked); err != nil && o.Error == "" {
		// Enqueued but not marked: a second replay finds the task queued
		// and reports not_dead.
		o.Error = "replayed, but not marked: " + err.Error()
	}
	return o
}

// replayClaimed replays e, claimed by c, to subscriber s; marked is the
// entry marked replayed, nil when it is not to be (nothing was sent).
func (p *Producer) replayClaimed(ctx context.Context, e tasks.DeadLetter, s tasks.Subscriber, c *replayClaim, how booking) (o ReplayOutcome, marked []byte) {
	o = ReplayOutcome{TaskID: e.TaskID, Outcome: Failed}
	mark := func(t Target) (ReplayOutcome, []byte) {
		e.ReplayedAt = p.nowFunc().UTC()
		o.Outcome, o.ProcessAt, o.HeldReason = t.Outcome, t.ProcessAt, t.HeldReason
		return o, tasks.MarshalLedger(e)
	}
	// The delivery record, its one owner, says whether it is dead: a
	// worker that died between the entry and asynq's archive left it to
	// be tried again, and its delivery clears the entry.
	if rec, err := p.delivery(ctx, e.SubscriberID, e.Event.ID); err == nil && rec.State != tasks.StateDead {
		if rec.State == tasks.StatePending {
			// A replay whose task was never enqueued (its enqueue failed,
			// or was cut off), retried: handed out again, and marked.
			t, ok, err := p.handOutAgain(ctx, s, e.Event.ID)
			if err != nil {
				o.Error = err.Error()
				return o, nil
			}
			if ok {
				return mark(t)
			}
		}
		o.Outcome = NotDead
		o.Error = fmt.Sprintf("the delivery is %s, not dead: nothing is sent again", rec.State)
		return o, nil
	} else if err != nil && !errors.Is(err, ErrUnknownDelivery) {
		o.Error = err.Error()
		return o, nil
	}
	// An entry of the release before keeps its attempts in a list: move
	// them into the entry, so that the replay's own attempts start apart.
	b, err := p.archiveAttempts(ctx, &e)
	if err != nil {
		o.Error = err.Error()
		return o, nil
	}
	c.sha = sha1hex(b)
	res, err := p.fanOut(ctx, *e.Event, nil, matched{subs: []tasks.Subscriber{s}}, how)
	if err != nil {
		o.Error = err.Error()
		return o, nil
	}
	if how != bookRun {
		// Booked again, whatever the breaker: its archived copy goes now,
		// not when the delivery is handed out (if ever: a parked one may
		// be delivered in another lane's queue), so that asynqmon does not
		// list as dead what the ledger marks replayed.
		if err := p.freeArchived(e.Queue, e.TaskID); err != nil {
			o, marked = mark(res.Targets[0])
			o.Error = err.Error()
			return o, marked
		}
	}
	return mark(res.Targets[0])
}

// archiveAttempts moves the attempt list of e (an entry of the release
// before) into its entry; an entry of this release has them already.
func (p *Producer) archiveAttempts(ctx context.Context, e *tasks.DeadLetter) ([]byte, error) {
	lk := p.keys.Ledger(e.TaskID)
	entry, list := lk.Entry, lk.Attempts
	b := tasks.MarshalLedger(*e) // e.Attempts was read from the list
	_, err := p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Set(ctx, entry, b, redis.KeepTTL)
		pl.Del(ctx, list)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return b, nil
}

// DeleteDeadLetter removes a ledger entry and its task from asynq's
// archive. The archived copy goes first: a DELETE that fails after it
// leaves the entry for the DELETE retried, never an archived task that
// the ledger no longer lists (asynqmon's Run of it would send a deleted
// dead letter).
func (p *Producer) DeleteDeadLetter(ctx context.Context, taskID string) error {
	shown := taskID
	taskID = p.storedTask(taskID)
	lk := p.keys.Ledger(taskID)
	v, err := p.rdb.Get(ctx, lk.Entry).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if err == nil {
		if e, ok := tasks.ParseLedger(v, nil); ok {
			if err := p.freeArchived(e.Queue, taskID); err != nil {
				return err
			}
		}
	}
	n, err := p.rdb.Del(ctx, lk.Entry, lk.Attempts).Result()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	p.dropFromIndexes(ctx, []string{taskID})
	if n == 0 {
		return fmt.Errorf("%w: no dead letter %s", ErrUnknownDeadLetter, shown)
	}
	return nil
}
