package worker

import (
	"context"
	"fmt"
	"strconv"
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
	GateInFlight   = "in_flight"
	GateRateLimit  = "rate_limit"
	GateRetryAfter = "retry_after" // the endpoint answered 429/503 with Retry-After
	GateBreaker    = "breaker"     // the destination's circuit breaker is open
)

// Dead-letter reasons.
const (
	DeadAttempts    = "attempts"
	DeadHorizon     = "horizon"
	DeadGone        = "gone"
	DeadUndecodable = "undecodable"
	DeadRefused     = "refused" // the SSRF guard refused the endpoint's address
)

// DroppedDeleted counts (namespace-wide, see ReadCounters) the tasks
// dropped unsent because their subscriber was deleted or re-created.
const DroppedDeleted = "dropped:deleted"

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
	Dropped   atomic.Int64 // not sent: subscriber deleted or re-created
	// RecordErrors counts batches of outcomes that could not be written
	// at first (they are retried; see recorder).
	RecordErrors atomic.Int64
}

// run is what one handler invocation learned. ProcessTask writes it, with
// the in-flight slot's release, in one pipeline when the run ends.
type run struct {
	taskID      string
	queue       string // the asynq queue the task is in
	member      string // its waiting-index member
	payload     []byte
	d           *tasks.Delivery // nil when the payload was unreadable
	keys        limits.GateKeys
	maxAttempts int
	attempt     *tasks.Attempt // the request this run made, if any
	sub         string
	token       string        // in-flight slot to release
	probe       bool          // sent as the open breaker's probe
	streak      bool          // sent while failures in a row were on record
	delivered   bool          // 2xx
	retried     int           // attempts spent before this run (asynq's count: lost leases included)
	e2e         time.Duration // publish → delivery
	late        time.Duration // due (publish or not-before) → delivery
	coolUntil   time.Time     // a 429's cooldown, in Redis' clock, once recorded
	coolLocal   time.Time     // the same deadline in this process's clock
	retryAt     time.Time     // a counted failure's next attempt, or a 429's deadline: parked then
	state       string        // the state the run leaves its delivery in ("" unchanged)
	next        time.Time     // when the delivery is tried next
	// The delivery record's write (logDelivery): its keys and arguments,
	// its command when sent by sha, or logFull to send the script's text.
	logKeys []string
	logArgs []any
	logCmd  *redis.Cmd
	logFull bool
	// The stored event of a task that refers to it (Delivery.PayloadRef):
	// read with the first Admit (eventRead), eventErr what the task ends
	// with if it cannot be sent (gone, unreadable, the read failed), and
	// body, its JSON, what the request sends.
	eventRead bool
	eventErr  error
	body      []byte
}

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

// ParseCounts reads a counters hash.
func ParseCounts(raw map[string]string) map[string]int64 {
	out := make(map[string]int64, len(raw))
	for k, v := range raw {
		n, _ := strconv.ParseInt(v, 10, 64)
		out[k] = n
	}
	return out
}
