package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

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
	keys := h.keys.Gates(d.SubscriberID)
	calls := &batchCalls{
		admits: group[limits.AdmitRequest, limits.Admission]{send: func(ctx context.Context, rs []limits.AdmitRequest) ([]limits.Admission, error) {
			return h.gates.AdmitGroup(ctx, keys, rs)
		}},
		commits: group[limits.Outcome, limits.Committed]{send: func(ctx context.Context, os []limits.Outcome) ([]limits.Committed, error) {
			return h.gates.CommitGroup(ctx, keys, os)
		}},
		notifies: group[time.Time, struct{}]{send: func(ctx context.Context, ats []time.Time) ([]struct{}, error) {
			return make([]struct{}, len(ats)), h.gates.Notify(ctx, h.keys.Ready(h.keys.QueueRegion(b.queue)), d.SubscriberID, slices.MinFunc(ats, time.Time.Compare))
		}},
	}
	for i, ev := range d.EventIDs {
		r := &run{taskID: tasks.TaskID(d.SubscriberID, ev), queue: b.queue, sub: d.SubscriberID, event: ev, keys: keys, batch: calls}
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

// group sends a batch's calls of one script (its Admits, its commits)
// together: a call made while none of the batch's is on its way goes at
// once; those made while one is go together in the next, as a
// database's group commit does. No call waits for another delivery's
// request.
type group[In, Out any] struct {
	send func(context.Context, []In) ([]Out, error)

	mu      sync.Mutex
	waiting []*groupCall[In, Out]
	sending bool
}

type groupCall[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{}
}

func (g *group[In, Out]) call(ctx context.Context, in In) (Out, error) {
	c := &groupCall[In, Out]{in: in, done: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, c)
	lead := !g.sending
	g.sending = true
	g.mu.Unlock()
	if lead {
		g.drain(ctx)
	}
	<-c.done
	return c.out, c.err
}

// drain sends what waits, group after group, until nothing does.
func (g *group[In, Out]) drain(ctx context.Context) {
	for {
		g.mu.Lock()
		cs := g.waiting
		g.waiting = nil
		if len(cs) == 0 {
			g.sending = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		ins := make([]In, len(cs))
		for i, c := range cs {
			ins[i] = c.in
		}
		outs, err := g.send(ctx, ins)
		for i, c := range cs {
			if c.err = err; err == nil {
				c.out = outs[i]
			}
			close(c.done)
		}
	}
}

// batchCalls are a batch's grouped script calls.
type batchCalls struct {
	admits   group[limits.AdmitRequest, limits.Admission]
	commits  group[limits.Outcome, limits.Committed]
	notifies group[time.Time, struct{}] // the ready index told (ZADD LT: the earliest counts)
}
