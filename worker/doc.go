// Package worker runs hooklane's asynq servers and its dispatchers.
//
// A dispatcher (dispatch.go) hands a subscriber's parked deliveries to
// asynq when the destination can take them (see package limits: one way
// to park). A run (handler.go) takes the delivery handed out (limits.Admit,
// which looks at the gates once more: paused, cooldown, rate slot,
// in-flight slots, breaker), sends one signed POST, and commits the
// outcome (limits.Commit: delivered, a Retry-After cooldown, a counted
// failure with backoff, a dead letter) before it answers asynq, so
// nothing of an outcome is written after asynq lets the task go. A
// delivery that cannot go after all is parked again, never slept out: a
// run waits in the process only for a rate slot or a free in-flight slot
// at most Config.MaxWait ahead.
//
// Attempts are hooklane's, counted in the delivery record: asynq's
// IsFailure is always false, so asynq's retry count stays 0, below the
// task's MaxRetry (its attempt budget, at least 1: tasks.AsynqMaxRetry),
// and asynq never archives a task on its own; a dead letter is committed
// to the ledger, then the task is archived.
package worker
