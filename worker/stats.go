package worker

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// Why a run parked its delivery without spending an attempt, as the
// per-subscriber counters name it ("deferred:<why>"): the state it parked
// it in (tasks.StateHeld, StateCooling, StateScheduled), or one of these.
const (
	DeferredRetryAfter = "retry_after" // the endpoint answered 429/503 with Retry-After
	DeferredProbe      = "probe"       // the open breaker's probe failed
	DeferredInFlight   = "in_flight"   // no in-flight slot freed within MaxWait
)

// DroppedDeleted counts (namespace-wide, see ReadCounters) the deliveries
// dropped unsent because their subscriber was deleted or re-created.
const DroppedDeleted = tasks.CounterDroppedDeleted

// Stats counts what this process's handler did, for benchmarks and tests.
type Stats struct {
	Runs      atomic.Int64 // handler invocations
	Delivered atomic.Int64 // 2xx answers
	Deferred  atomic.Int64 // rescheduled without spending an attempt
	Failed    atomic.Int64 // counted failures that will be retried
	Dead      atomic.Int64 // dead-lettered (archived)
	Dropped   atomic.Int64 // not sent: subscriber deleted or re-created
	HandedOut atomic.Int64 // parked deliveries its dispatchers handed to asynq
	// CommitErrors counts outcomes that could not be written (the task
	// is tried again: no outcome is lost, a delivered one may be sent twice).
	CommitErrors atomic.Int64
	// Newer counts tasks of a later release's version, put back unsent.
	Newer atomic.Int64
	// Adopted counts tasks of the release before taken into the schedule.
	Adopted atomic.Int64
	// Batches counts the batch tasks run, Batched their deliveries.
	Batches, Batched atomic.Int64
	// Replayed counts dead letters an operator ran from asynq's archive
	// (asynqmon's Run), replayed by their run (see replayRun).
	Replayed atomic.Int64
	// Admits counts the requests made to Admit: one a delivery when its
	// slots are free, another after waiting for a rate slot booked ahead,
	// more while it waits in the busy lane for an in-flight slot.
	Admits atomic.Int64
}

// run is what one handler invocation knows of its task and delivery.
type run struct {
	taskID  string
	queue   string // the asynq queue the task is in
	payload []byte
	sub     string
	event   string
	keys    limits.GateKeys
	token   string       // names the run: its in-flight slot, the record's owner
	limit   limits.Limit // the subscriber's: the effective rate's unit, and why status shows it lower
	adm     limits.Admission
	// admittedAt is when Admit answered, in this process's monotonic
	// clock: Redis' clock then was adm.Now (see redisNow).
	admittedAt time.Time
	body       []byte // the stored event: what the request sends
	// coolUntil is the cooldown a 429 or 503 with Retry-After (or a spent
	// quota) set, in Redis' clock, once its headers were read; coolLost:
	// it could not be written (its commit writes it).
	coolUntil time.Time
	coolLost  bool
	// batch: the delivery is one of a batch task's (batch.go), whose
	// Admits and commits go together; taskID is then its own
	// single-delivery task's, which it is archived as if it dies (payload
	// is nil: death builds it only then).
	batch *batchCalls
	// toAdmit, held: what its batch's grouped calls wait for it (batchCalls)
	toAdmit, held bool
}

// admit runs Admit for the run: alone, or with the batch's others asked
// for at the same moment.
func (r *run) admit(ctx context.Context, g *limits.Gates, req limits.AdmitRequest) (limits.Admission, error) {
	if r.batch != nil {
		return r.batch.admit(ctx, r, req)
	}
	return g.Admit(ctx, r.keys, req)
}

// commit commits the run's outcome: alone, or with the batch's others
// that are ready at the same moment.
func (r *run) commit(ctx context.Context, g *limits.Gates, o limits.Outcome) (limits.Committed, error) {
	if r.batch != nil {
		return r.batch.commit(ctx, r, o)
	}
	return g.Commit(ctx, r.keys, o)
}

// redisNow is Redis' clock now, from the clock Admit answered with and the
// time passed since: deadlines (the horizon) are compared in it.
func (r *run) redisNow() time.Time { return r.adm.Now.Add(time.Since(r.admittedAt)) }

// LatencyBuckets are the upper bounds, in seconds, of the delivery latency
// histograms kept per subscriber.
var LatencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

func bucket(h string, d time.Duration) string {
	s := d.Seconds()
	for _, le := range LatencyBuckets {
		if s <= le {
			return h + ":" + strconv.FormatFloat(le, 'g', -1, 64)
		}
	}
	return h + ":+Inf"
}

// countDelivered counts a delivery delivered, with its latency from its
// publish (e2e) and from its due time (late). A delivery due when
// published (most are) has the two alike: it is counted once, in the "el"
// fields, which ParseCounts counts in both histograms and as delivered
// (two fields written instead of five); else as delivered and in each
// histogram.
func countDelivered(counters map[string]int64, e2e, late time.Duration) {
	if e2e == late {
		counters[bucket(histBoth, e2e)]++
		counters[histBoth+"_sum_ms"] += e2e.Milliseconds()
		return
	}
	counters["delivered"]++
	counters[bucket("e2e", e2e)]++
	counters[bucket("late", late)]++
	counters["e2e_sum_ms"] += e2e.Milliseconds()
	counters["late_sum_ms"] += late.Milliseconds()
}

// histBoth names the fields of the latencies alike in both histograms.
const histBoth = "el"

// ReadStats returns subscriber sub's counters (tasks.Keys.Stats). Fields:
// delivered, failed, infra_error, deferred:<gate>, dead:<reason>,
// http:<status> per answer received (http:error when none was), and per
// histogram h (e2e, late) h:<le> bucket counts (not cumulative; le "+Inf"
// last), h_sum_ms.
func ReadStats(ctx context.Context, rdb redis.UniversalClient, namespace, sub string) (map[string]int64, error) {
	return readCounts(ctx, rdb, tasks.Keys(namespace).Stats(sub))
}

// ReadCounters returns the namespace-wide counters (DroppedDeleted).
func ReadCounters(ctx context.Context, rdb redis.UniversalClient, namespace string) (map[string]int64, error) {
	return readCounts(ctx, rdb, tasks.Keys(namespace).Counters())
}

func readCounts(ctx context.Context, rdb redis.UniversalClient, key string) (map[string]int64, error) {
	raw, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	return ParseCounts(raw), nil
}

// ParseCounts reads a counters hash: the "el" fields (countDelivered) are
// counted in the e2e and the late histograms both, and each of their
// buckets' counts as that many delivered.
func ParseCounts(raw map[string]string) map[string]int64 {
	out := make(map[string]int64, len(raw))
	for k, v := range raw {
		n, _ := strconv.ParseInt(v, 10, 64)
		if rest, ok := strings.CutPrefix(k, histBoth); ok && (rest == "_sum_ms" || strings.HasPrefix(rest, ":")) {
			out["e2e"+rest] += n
			out["late"+rest] += n
			if rest != "_sum_ms" {
				out["delivered"] += n
			}
			continue
		}
		out[k] += n
	}
	return out
}
