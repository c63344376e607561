package limits

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// DeferredError asks the asynq server to reschedule a task at Until without
// counting an attempt. A worker's Config.IsFailure returns false for it and
// Config.RetryDelayFunc returns the delay to CeilSecond(Until), so the move
// from active to retry happens in asynq's single Lua step, never earlier.
type DeferredError struct {
	Until  time.Time
	Gate   string // which check deferred it, for metrics
	Reason string // shown in asynqmon as the task's last error
}

func (e *DeferredError) Error() string {
	return fmt.Sprintf("deferred until %s: %s", e.Until.UTC().Format(time.RFC3339Nano), e.Reason)
}

// Delay is how long from now the task must wait so that asynq's whole-second
// schedule does not make it due before Until.
func (e *DeferredError) Delay(now time.Time) time.Duration {
	return max(CeilSecond(e.Until).Sub(now), 0)
}

// Backoff is exponential backoff with full jitter for a task that has failed
// n times: a uniform draw from [0, min(max, base·2^n)), never below base.
func Backoff(n int, base, max time.Duration) time.Duration {
	ceil := max
	if n < 30 { // base<<n would overflow past ~2^33 s
		ceil = min(base<<n, max)
	}
	return base + time.Duration(rand.Int64N(int64(ceil-base)+1))
}
