// Package worker runs hooklane's asynq server: it takes each delivery task,
// passes it through the subscriber's gates (paused, cooldown, max in-flight,
// rate limit), sends one signed POST, and turns the answer into done, a
// reschedule at the endpoint's Retry-After, a counted retry with backoff, or
// a dead letter (asynq's archive).
//
// A gate that says "not yet" never sleeps out a long wait: the task is
// rescheduled with a limits.DeferredError, which Config.IsFailure and
// Config.RetryDelayFunc turn into asynq's atomic active→retry move without
// spending an attempt. Only waits under Config.MaxWait (1s) are waited in the
// handler, one waiter per destination at a time, because asynq schedules in
// whole seconds and a throttled backlog would otherwise wake in lumps and
// churn.
package worker
