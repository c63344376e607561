package worker

import (
	"context"
	"errors"
	"sync"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// runBatch runs a batch task: several deliveries of one subscriber that a
// turn handed out together (tasks.BatchVersion). Each is run as a task of
// its own would be (deliver: its Admit, its request, its outcome committed
// to its own record) side by side, and the batch is answered once every
// outcome is committed:
//
//   - a delivery that ended, or was parked, or that a live run elsewhere
//     owns (its runs entry hands it out again once that run's slot
//     lapses), needs nothing more of the task;
//   - a delivery that died is enqueued as its own single-delivery task
//     (producer.DeadCopy), which its run archives: asynq's archive holds
//     one task per dead delivery, and asynqmon's Run replays it alone;
//   - anything else (a shutdown, a Redis failure) has asynq run the batch
//     again: its run finds the deliveries whose outcome was committed
//     ended or parked (their records say so) and sends only the others.
//
// So a worker killed mid-batch re-sends only what it had not committed,
// and the gates hold per delivery: each request takes its own in-flight
// slot and rate slot, and a 429 or an opened breaker stops the batch's
// unsent deliveries at their Admit (parked, no attempt spent).
func (h *handler) runBatch(ctx context.Context, b *run, d tasks.Delivery) error {
	h.stats.Batches.Add(1)
	h.stats.Batched.Add(int64(len(d.EventIDs)))
	sub, err := h.subscriber(ctx, d.SubscriberID, "")
	if errors.Is(err, errDeleted) {
		for range d.EventIDs {
			_ = h.dropped(b, "the subscriber was deleted")
		}
		return asynq.RevokeTask
	}
	if err != nil {
		return err
	}
	answers := make([]error, len(d.EventIDs))
	var wg sync.WaitGroup
	for i, ev := range d.EventIDs {
		r := &run{taskID: tasks.TaskID(d.SubscriberID, ev), queue: b.queue, sub: d.SubscriberID, event: ev,
			keys: h.keys.Gates(d.SubscriberID), batch: true}
		r.payload = tasks.NewDeliverTask(d.SubscriberID, ev).Payload()
		wg.Go(func() { answers[i] = h.deliver(ctx, r, sub) })
	}
	wg.Wait()
	var again error
	for i, err := range answers {
		var owned *limits.DeferredError
		switch {
		case err == nil, errors.Is(err, asynq.RevokeTask), errors.As(err, &owned):
		case errors.Is(err, asynq.SkipRetry):
			cerr := fault(ctx, FaultEnqueue, func() error {
				return h.prod.DeadCopy(context.WithoutCancel(ctx), sub.Subscriber, d.EventIDs[i], b.queue)
			})
			if cerr != nil && again == nil {
				again = h.infra("dead copy", d.SubscriberID, cerr)
			}
		case again == nil || ctx.Err() != nil:
			again = err
		}
	}
	if again != nil && ctx.Err() != nil {
		return ctx.Err() // shutting down: asynq has put the task back
	}
	return again
}
