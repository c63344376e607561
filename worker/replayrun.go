package worker

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/producer"
)

// replayRun is a run that found its delivery dead. If an operator ran its
// task from asynq's archive (asynqmon's Run), the dead letter is replayed
// with this task as its hand-out (producer.ReplayRun: the generation
// check, the claim, the ledger entry marked replayed), and the run goes
// on to admit the delivery through the gates: it is sent once, or parked
// behind them. Any other copy goes to the archive, sending nothing (one
// left by a run whose worker died between the dead state's commit and
// asynq's archive), and so does a Run that cannot be replayed, with the
// reason as its last error in asynqmon.
func (h *handler) replayRun(ctx context.Context, r *run) error {
	o, ran := h.prod.ReplayRun(context.WithoutCancel(ctx), r.queue, r.taskID)
	switch {
	case !ran:
		// this copy goes to the archive too (a batch's dead delivery's,
		// producer.DeadCopy), with its death's error as its last, as
		// asynqmon shows it
		why := "dead-lettered"
		if e, _, err := h.prod.DeadLetters(ctx, producer.DeadLetterQuery{IDs: []string{r.taskID}}); err == nil && len(e) == 1 && e[0].Error != "" {
			why = e[0].Error
		}
		return fmt.Errorf("%s: %w", why, asynq.SkipRetry)
	case o.Outcome == producer.Failed:
		h.log.Warn("dead letter run from asynq's archive: not replayed", "task_id", r.taskID, "err", o.Error)
		return fmt.Errorf("run from the archive, not replayed: %s: %w", o.Error, asynq.SkipRetry)
	}
	h.stats.Replayed.Add(1)
	h.log.Info("dead letter run from asynq's archive: replayed", "task_id", r.taskID, "outcome", o.Outcome, "note", o.Error)
	return nil
}
