package worker

import (
	"context"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// adopt takes a task of the release before (payload version 2, in its
// queues, which this release's workers serve while they hold tasks) into
// its subscriber's schedule: its horizon and attempt budget go into the
// delivery record, the delivery into the lot, and a dispatcher hands it
// out as a task of this release. The old task is let go once that is
// written (a worker that dies in between leaves it to asynq, and its rerun
// finds it adopted: nothing written again, the dispatcher told). Its
// stored event, kept the old way, is read where it is.
func (h *handler) adopt(ctx context.Context, r *run, d tasks.Delivery, l *tasks.LegacyDelivery) error {
	ctx = context.WithoutCancel(ctx)
	r.sub, r.event, r.keys = d.SubscriberID, d.EventID, h.keys.Gates(d.SubscriberID)
	retried, _ := asynq.GetRetryCount(ctx)
	due := l.EnqueuedAt
	if due.Before(l.NotBefore) {
		due = l.NotBefore
	}
	a, err := h.gates.Adopt(ctx, r.keys, limits.Legacy{EventID: d.EventID, Gen: l.Gen, Type: l.Event.Type, TaskID: r.taskID,
		MaxAttempts: l.MaxAttempts, Spent: retried, Published: l.EnqueuedAt, Due: due, Expires: l.ExpiresAt, Dedup: h.cfg.DedupWindow})
	if err != nil {
		return h.infra("adopt", r.sub, err)
	}
	if a.Owned {
		// Adopted before (this task's run died before asynq let it go):
		// this release has it, maybe in flight. Only the dispatcher is
		// told again, in case the run that adopted it could not.
		h.log.Debug("a task of the release before adopted already: let go", "task_id", r.taskID)
		if err := h.notify(r, a.Parked, false); err != nil {
			return err
		}
		return asynq.RevokeTask
	}
	if a.Due.IsZero() {
		return h.dropped(r, "a task of the release before whose subscriber was deleted, or whose delivery ended")
	}
	h.stats.Adopted.Add(1)
	h.log.Debug("adopted a task of the release before", "task_id", r.taskID)
	// Its region is its subscriber's; the old queue's name says it.
	if err := h.notify(r, a.Due, false); err != nil {
		return err
	}
	return asynq.RevokeTask
}
