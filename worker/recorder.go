package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// record releases the run's slot, counts its outcome and, for a dead
// letter, writes the ledger entry. It returns the error asynq should see: a
// dead letter whose entry could not be written is retried instead of
// archived, so the ledger never misses one.
func (h *handler) record(ctx context.Context, r *run, err error) error {
	h.stats.Runs.Add(1)
	var fields []string
	var d *limits.DeferredError
	var dl *deadLetter
	var dr *droppedError
	var ie *infraError
	var re *RetryError
	switch {
	case err == nil:
		h.stats.Delivered.Add(1)
		fields = append(fields, "delivered", bucket("e2e", r.e2e), bucket("late", r.late))
	case errors.As(err, &d):
		h.stats.Deferred.Add(1)
		fields = append(fields, "deferred:"+d.Gate)
	case errors.As(err, &dr):
		h.stats.Dropped.Add(1)
	case errors.As(err, &dl):
		h.stats.Dead.Add(1)
		fields = append(fields, "dead:"+dl.reason)
	case errors.Is(err, asynq.SkipRetry):
		h.stats.Dead.Add(1)
		fields = append(fields, "dead:"+DeadUndecodable)
	case errors.As(err, &ie):
		fields = append(fields, "infra_error")
	default:
		h.stats.Failed.Add(1)
		fields = append(fields, "failed")
		if errors.As(err, &re) {
			r.retryAt = time.Now().Add(re.After)
		}
	}
	ctx = context.WithoutCancel(ctx)
	r.deliveryState(err)
	if dr != nil {
		return h.recordDropped(ctx, r, err)
	}
	if errors.Is(err, asynq.SkipRetry) {
		// The ledger entry is committed before asynq archives the task.
		if perr := h.writeDeadLetter(ctx, r, err, fields); perr != nil {
			return h.infra("dead-letter ledger", r.sub, perr)
		}
		return err
	}
	if r.sub == "" {
		return err
	}
	x := recorded{*r, fields}
	if !h.recorder.add(x) {
		// The recorder is closed or its queue is full (Redis slow): write
		// this run's outcome here, so nothing waits on a lock.
		var incs []increment
		cmds, perr := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			h.count(ctx, p, &x.r, x.fields, direct(ctx, p, &incs))
			return nil
		})
		if perr = h.noScript(ctx, []*run{&x.r}, cmds, perr); perr != nil {
			h.stats.RecordErrors.Add(1)
			h.log.Warn("could not record outcome; a lost slot release frees itself after its ttl",
				"subscriber_id", r.sub, "task_id", r.taskID, "err", perr)
		} else {
			h.totals.addAll(incs)
			if r.token != "" {
				h.room.released(r.sub)
			}
		}
	}
	return err
}

// recordDropped counts a task dropped unsent and forgets its bookkeeping.
func (h *handler) recordDropped(ctx context.Context, r *run, err error) error {
	_, perr := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, h.keys.Counters(), DroppedDeleted, 1)
		if r.token != "" {
			h.gates.ReleaseIn(ctx, p, r.keys, r.token)
		}
		h.gates.UnparkIn(ctx, p, r.keys, r.member)
		h.leftFresh(ctx, p, r)
		p.Del(ctx, h.keys.Ledger(r.taskID).Attempts)
		return nil
	})
	if perr != nil {
		// Retried: counting it is the whole point of not writing a ledger entry.
		return h.infra("count dropped task", r.sub, perr)
	}
	h.log.Debug("task dropped", "task_id", r.taskID, "reason", err.Error())
	return err
}

// count queues the slot release, the attempt and the task result of run r
// on p, and hands its counter increments to inc (see direct).
func (h *handler) count(ctx context.Context, p redis.Pipeliner, r *run, fields []string, inc func(key, field string, n int64)) {
	if r.token != "" {
		h.gates.ReleaseIn(ctx, p, r.keys, r.token)
	}
	if r.attempt != nil {
		code := "error"
		if r.attempt.Status > 0 {
			code = strconv.Itoa(r.attempt.Status)
		}
		fields = append(fields, "http:"+code)
		lk := h.keys.Ledger(r.taskID)
		key := lk.Attempts
		switch {
		case r.delivered && r.retried > 0:
			// Earlier attempts were kept for a dead letter that did not
			// happen; a ledger entry written for this task before a worker
			// died (or its archive write failed) is stale: it was delivered.
			p.Del(ctx, key, lk.Entry)
			p.ZRem(ctx, lk.Index, r.taskID)
			p.ZRem(ctx, h.keys.AllDeadIndex(), r.taskID)
		case r.delivered:
		default:
			b, _ := json.Marshal(r.attempt)
			p.RPush(ctx, key, b)
			p.ExpireAt(ctx, key, r.d.ExpiresAt.Add(48*time.Hour))
		}
	}
	if !r.retryAt.IsZero() {
		h.gates.ParkIn(ctx, p, r.keys, r.member, r.retryAt)
	}
	key := h.keys.Stats(r.sub)
	for _, f := range fields {
		inc(key, f, 1)
	}
	h.logDelivery(ctx, p, r)
	if r.delivered {
		h.leftFresh(ctx, p, r)
		inc(key, "e2e_sum_ms", r.e2e.Milliseconds())
		inc(key, "late_sum_ms", r.late.Milliseconds())
	}
}

// direct is count's inc for a run written in a pipeline of its own, p:
// HINCRBY on p, and each increment kept in *incs, for the namespace's
// totals once p is in (h.totals.addAll).
func direct(ctx context.Context, p redis.Pipeliner, incs *[]increment) func(key, field string, n int64) {
	return func(key, field string, n int64) {
		p.HIncrBy(ctx, key, field, n)
		*incs = append(*incs, increment{key, field, n})
	}
}

// leftFresh queues the removal of an ended task from its subscriber's
// fresh-lane count, if it was in the fresh lane.
func (h *handler) leftFresh(ctx context.Context, p redis.Pipeliner, r *run) {
	if h.keys.QueueLane(r.queue) == tasks.LaneFresh {
		h.gates.LeftFreshIn(ctx, p, r.keys, r.taskID)
	}
}

// recorder writes finished runs' slot releases, attempts and counters to
// Redis in batches: one pipeline for whatever finished while the previous
// one was in flight, instead of a round trip per delivery. Dead letters do
// not go through it: their ledger entry is written before asynq archives.
//
// A batch that cannot be written is kept and written with the next one,
// for up to maxRecordAge; then it is dropped, counted and logged (its
// slots have expired by then anyway). add never blocks: with the queue full
// (Redis slow) the handler writes its own run.
type recorder struct {
	h      *handler
	mu     sync.RWMutex
	closed bool
	ch     chan recorded
	done   chan struct{}
}

type recorded struct {
	r      run
	fields []string
}

const maxRecordAge = time.Minute

func newRecorder(h *handler) *recorder {
	return &recorder{h: h, ch: make(chan recorded, 1024), done: make(chan struct{})}
}

// add queues a run, or reports false when the recorder is closed or full.
func (rc *recorder) add(x recorded) bool {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if rc.closed {
		return false
	}
	select {
	case rc.ch <- x:
		return true
	default:
		return false
	}
}

// run writes batches until close. Slot releases, attempts and results go
// out with the next batch; counters are summed here and flushed every
// countFlush, since metrics do not need them sooner.
func (rc *recorder) run() {
	defer close(rc.done)
	ctx := context.Background()
	h := rc.h
	counts := map[[2]string]int64{}
	inc := func(key, field string, n int64) { counts[[2]string{key, field}] += n }
	flush := func() {
		if len(counts) == 0 {
			return
		}
		_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for kf, n := range counts {
				p.HIncrBy(ctx, kf[0], kf[1], n)
			}
			return nil
		})
		if err != nil {
			h.stats.RecordErrors.Add(1)
			h.log.Warn("could not flush counters; will retry", "err", err)
			return
		}
		clear(counts)
	}
	tick := time.NewTicker(countFlush)
	defer tick.Stop()
	var pending []recorded // written with the next batch
	var pendingSince time.Time
	batch := make([]recorded, 0, 256)
	for {
		var first recorded
		var ok bool
		select {
		case <-tick.C:
			flush()
			if len(pending) == 0 {
				continue
			}
		case first, ok = <-rc.ch:
			if !ok {
				rc.write(ctx, pending, inc) // a last try
				flush()
				return
			}
		}
		batch = append(batch[:0], pending...)
		if ok {
			batch = append(batch, first)
		}
	fill:
		for added := 1; added < 256; added++ {
			select {
			case x, ok := <-rc.ch:
				if !ok {
					break fill
				}
				batch = append(batch, x)
			default:
				break fill
			}
		}
		if rc.write(ctx, batch, inc) {
			pending, pendingSince = pending[:0], time.Time{}
			continue
		}
		h.stats.RecordErrors.Add(1)
		if pendingSince.IsZero() {
			pendingSince = time.Now()
		}
		if time.Since(pendingSince) > maxRecordAge {
			h.log.Error("dropping outcomes that could not be written for a minute: their attempts are missing from the record",
				"runs", len(batch))
			pending, pendingSince = pending[:0], time.Time{}
			continue
		}
		h.log.Warn("could not record outcomes; will retry with the next batch", "runs", len(batch))
		pending = append(pending[:0], batch...)
	}
}

// write writes a batch in one pipeline and wakes the busy lanes whose slots
// it released. Counter increments go to inc, and to the namespace's
// totals, only once the batch is in.
func (rc *recorder) write(ctx context.Context, batch []recorded, inc func(key, field string, n int64)) bool {
	if len(batch) == 0 {
		return true
	}
	h := rc.h
	var deferred []increment
	// With the gate scripts of the deliveries starting meanwhile: one round
	// trip for both.
	cmds, err := h.gates.Pipelined(ctx, func(p redis.Pipeliner) {
		for i := range batch {
			h.count(ctx, p, &batch[i].r, batch[i].fields, func(key, field string, n int64) {
				deferred = append(deferred, increment{key, field, n})
			})
		}
	})
	runs := make([]*run, len(batch))
	for i := range batch {
		runs[i] = &batch[i].r
	}
	if err = h.noScript(ctx, runs, cmds, err); err != nil {
		return false
	}
	for _, d := range deferred {
		inc(d.key, d.field, d.n)
	}
	h.totals.addAll(deferred)
	for i := range batch {
		if batch[i].r.token != "" {
			h.room.released(batch[i].r.sub)
		}
	}
	return true
}

// countFlush is how often the recorder writes summed counters.
const countFlush = 200 * time.Millisecond

// close writes what is queued and stops; later runs are written one by one.
func (rc *recorder) close() {
	rc.mu.Lock()
	if !rc.closed {
		rc.closed = true
		close(rc.ch)
	}
	rc.mu.Unlock()
	<-rc.done
}
