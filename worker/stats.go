package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// Gates, as named in DeferredError.Gate and in the per-subscriber counters.
const (
	GateNotBefore  = "not_before"
	GatePaused     = "paused"
	GateCooldown   = "cooldown"
	GateWaiters    = "waiters" // this process already has MaxWaiters tasks waiting for the destination
	GateInFlight   = "in_flight"
	GateRateLimit  = "rate_limit"
	GateRetryAfter = "retry_after" // the endpoint answered 429/503 with Retry-After
)

// Dead-letter reasons.
const (
	DeadAttempts    = "attempts"
	DeadHorizon     = "horizon"
	DeadGone        = "gone"
	DeadDeleted     = "deleted"
	DeadUndecodable = "undecodable"
	DeadRefused     = "refused" // the SSRF guard refused the endpoint's address
)

// deadLetter sends a task to asynq's archive (it unwraps to asynq.SkipRetry)
// with a reason for the counters and a message for asynqmon.
type deadLetter struct{ reason, msg string }

func (e *deadLetter) Error() string { return e.msg }
func (e *deadLetter) Unwrap() error { return asynq.SkipRetry }

func dead(reason, format string, args ...any) error {
	return &deadLetter{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// Stats counts what this process's handler did, for benchmarks and tests.
type Stats struct {
	Runs      atomic.Int64 // handler invocations
	Delivered atomic.Int64 // 2xx answers
	Deferred  atomic.Int64 // rescheduled without spending an attempt
	Failed    atomic.Int64 // counted failures that will be retried
	Dead      atomic.Int64 // dead-lettered (archived)
}

// run is what one handler invocation learned. ProcessTask writes it, with
// the in-flight slot's release, in one pipeline when the run ends.
type run struct {
	taskID    string
	payload   []byte
	d         *tasks.Delivery // nil when the payload was unreadable
	attempt   *tasks.Attempt  // the request this run made, if any
	sub       string
	token     string        // in-flight slot to release
	delivered bool          // 2xx
	result    []byte        // the asynq task result of a delivery (Result JSON)
	retried   int           // counted failures before this run
	e2e       time.Duration // publish → delivery
	late      time.Duration // due (publish or not-before) → delivery
}

// LatencyBuckets are the upper bounds, in seconds, of the delivery latency
// histograms kept per subscriber.
var LatencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// StatsKey is the hash of subscriber sub's counters. Fields: delivered,
// failed, infra_error, deferred:<gate>, dead:<reason>, http:<status> per
// answer received (http:error when none was), and per histogram h
// (e2e, late) h:<le> bucket counts (not cumulative; le "+Inf" last),
// h_sum_ms.
func StatsKey(namespace, sub string) string { return namespace + ":stats:" + sub }

// record releases the run's slot, counts its outcome and, for a dead
// letter, writes the ledger entry, in one round trip. It returns the error
// asynq should see: a dead letter whose entry could not be written is
// retried instead of archived, so the ledger never misses one.
func (h *handler) record(ctx context.Context, r *run, err error) error {
	h.stats.Runs.Add(1)
	var fields []string
	var d *limits.DeferredError
	var dl *deadLetter
	var ie *infraError
	switch {
	case err == nil:
		h.stats.Delivered.Add(1)
		fields = append(fields, "delivered", bucket("e2e", r.e2e), bucket("late", r.late))
	case errors.As(err, &d):
		h.stats.Deferred.Add(1)
		fields = append(fields, "deferred:"+d.Gate)
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
	}
	ctx = context.WithoutCancel(ctx)
	var perr error
	dead := errors.Is(err, asynq.SkipRetry)
	if dead {
		// The ledger entry is committed before asynq archives the task.
		_, perr = h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			h.writeDeadLetter(ctx, p, r, err)
			h.count(ctx, p, r, fields, nil)
			return nil
		})
	} else if r.sub != "" && !h.recorder.add(recorded{*r, fields}) {
		_, perr = h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			h.count(ctx, p, r, fields, nil)
			return nil
		})
	}
	switch {
	case perr != nil && dead:
		return h.infra("dead-letter ledger", r.sub, perr)
	case perr != nil:
		// A lost release costs the slot its ttl; a lost count skews metrics.
		h.log.Warn("could not record outcome", "subscriber_id", r.sub, "task_id", r.taskID, "err", perr)
	}
	return err
}

// count queues the slot release, the attempt and the task result of run r
// on p, and hands its counter increments to inc (nil: HINCRBY on p).
func (h *handler) count(ctx context.Context, p redis.Pipeliner, r *run, fields []string, inc func(key, field string, n int64)) {
	if inc == nil {
		inc = func(key, field string, n int64) { p.HIncrBy(ctx, key, field, n) }
	}
	if r.token != "" {
		h.gates.ReleaseIn(ctx, p, r.sub, r.token)
	}
	if r.attempt != nil {
		if r.sub != "" {
			code := "error"
			if r.attempt.Status > 0 {
				code = strconv.Itoa(r.attempt.Status)
			}
			fields = append(fields, "http:"+code)
		}
		b, _ := json.Marshal(r.attempt)
		key := h.keys.Attempts(r.taskID)
		if r.delivered {
			if r.retried > 0 { // earlier attempts were kept for a dead letter that did not happen
				p.Del(ctx, key)
			}
		} else {
			p.RPush(ctx, key, b)
			p.ExpireAt(ctx, key, r.d.ExpiresAt.Add(48*time.Hour))
		}
	}
	if r.sub == "" {
		return
	}
	key := StatsKey(h.cfg.Namespace, r.sub)
	for _, f := range fields {
		inc(key, f, 1)
	}
	if r.delivered {
		// What asynq's ResultWriter does, but in this pipeline instead of a
		// round trip of its own. TestPublishTwiceDeliversOnce reads it back
		// through asynq.Inspector, so an asynq upgrade that moves the field
		// fails a test.
		resultScript.Eval(ctx, p, []string{"asynq:{" + h.cfg.Namespace + "}:t:" + r.taskID}, r.result)
		inc(key, "e2e_sum_ms", r.e2e.Milliseconds())
		inc(key, "late_sum_ms", r.late.Milliseconds())
	}
}

// KEYS[1]: an asynq task hash. ARGV[1]: the result. Sets the hash's result
// field if the task still exists: written after asynq completed the task, an
// HSET alone would recreate the hash of a task kept without retention.
var resultScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'result', ARGV[1]) end
return 0`)

// recorder writes finished runs' slot releases, attempts and counters to
// Redis in batches: one pipeline for whatever finished while the previous
// one was in flight, instead of a round trip per delivery. Dead letters do
// not go through it: their ledger entry is written before asynq archives.
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

func newRecorder(h *handler) *recorder {
	return &recorder{h: h, ch: make(chan recorded, 1024), done: make(chan struct{})}
}

// add queues a run, or reports false once the recorder is closed.
func (rc *recorder) add(x recorded) bool {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if rc.closed {
		return false
	}
	rc.ch <- x
	return true
}

// run writes batches until close. Slot releases, attempts and results go
// out with the next batch; counters are summed here and flushed every
// countFlush, since metrics do not need them sooner.
func (rc *recorder) run() {
	defer close(rc.done)
	ctx := context.Background()
	counts := map[[2]string]int64{}
	inc := func(key, field string, n int64) { counts[[2]string{key, field}] += n }
	flush := func() {
		if len(counts) == 0 {
			return
		}
		_, err := rc.h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for kf, n := range counts {
				p.HIncrBy(ctx, kf[0], kf[1], n)
			}
			return nil
		})
		if err != nil {
			rc.h.log.Warn("could not flush counters; will retry", "err", err)
			return
		}
		clear(counts)
	}
	tick := time.NewTicker(countFlush)
	defer tick.Stop()
	batch := make([]recorded, 0, 256)
	for {
		var first recorded
		var ok bool
		select {
		case <-tick.C:
			flush()
			continue
		case first, ok = <-rc.ch:
		}
		if !ok {
			flush()
			return
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < cap(batch) {
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
		_, err := rc.h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range batch {
				rc.h.count(ctx, p, &batch[i].r, batch[i].fields, inc)
			}
			return nil
		})
		if err != nil {
			// A lost release costs the slot its ttl.
			rc.h.log.Warn("could not record outcomes", "runs", len(batch), "err", err)
		}
	}
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

// writeDeadLetter queues the ledger entry of a dead run.
func (h *handler) writeDeadLetter(ctx context.Context, p redis.Pipeliner, r *run, err error) {
	now := time.Now()
	e := tasks.DeadLetter{TaskID: r.taskID, SubscriberID: r.sub, Reason: DeadUndecodable, Error: err.Error(), DeadAt: now}
	var dl *deadLetter
	if errors.As(err, &dl) {
		e.Reason = dl.reason
	}
	if r.d != nil {
		e.Event = &r.d.Event
	} else {
		e.Payload = string(r.payload)
	}
	b, _ := json.Marshal(e)
	entry, attempts := h.keys.DeadLetter(r.taskID), h.keys.Attempts(r.taskID)
	p.Set(ctx, entry, b, h.cfg.DeadLetterRetention)
	if h.cfg.DeadLetterRetention > 0 {
		p.Expire(ctx, attempts, h.cfg.DeadLetterRetention)
	} else {
		p.Persist(ctx, attempts)
	}
	z := redis.Z{Score: float64(now.UnixMilli()), Member: r.taskID}
	p.ZAdd(ctx, h.keys.DeadIndex(), z)
	if r.sub != "" {
		p.ZAdd(ctx, h.keys.DeadBySubscriber(r.sub), z)
	}
}

func bucket(h string, d time.Duration) string {
	s := d.Seconds()
	for _, le := range LatencyBuckets {
		if s <= le {
			return h + ":" + strconv.FormatFloat(le, 'g', -1, 64)
		}
	}
	return h + ":+Inf"
}

// ReadStats returns subscriber sub's counters (see StatsKey).
func ReadStats(ctx context.Context, rdb redis.UniversalClient, namespace, sub string) (map[string]int64, error) {
	raw, err := rdb.HGetAll(ctx, StatsKey(namespace, sub)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(raw))
	for k, v := range raw {
		n, _ := strconv.ParseInt(v, 10, 64)
		out[k] = n
	}
	return out, nil
}
