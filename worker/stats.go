package worker

import (
	"errors"
	"sync/atomic"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/limits"
)

// Stats counts what the handler did, for benchmarks and metrics.
type Stats struct {
	Runs      atomic.Int64 // handler invocations
	Delivered atomic.Int64 // 2xx answers
	Deferred  atomic.Int64 // rescheduled without spending an attempt
	Failed    atomic.Int64 // counted failures that will be retried
	Dead      atomic.Int64 // dead-lettered (archived)
}

func (s *Stats) count(err error) {
	var d *limits.DeferredError
	var r *RetryError
	switch {
	case err == nil:
		s.Delivered.Add(1)
	case errors.As(err, &d):
		s.Deferred.Add(1)
	case errors.Is(err, asynq.SkipRetry):
		s.Dead.Add(1)
	case errors.As(err, &r):
		s.Failed.Add(1)
	}
}
