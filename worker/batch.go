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
	group := &commitGroup{gates: h.gates, keys: h.keys.Gates(d.SubscriberID)}
	for i, ev := range d.EventIDs {
		r := &run{taskID: tasks.TaskID(d.SubscriberID, ev), queue: b.queue, sub: d.SubscriberID, event: ev,
			keys: h.keys.Gates(d.SubscriberID), batch: true, group: group}
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

// commitGroup commits a batch's outcomes: an outcome ready while no commit
// of the batch is on its way goes at once; those that come while one is
// go together in the next (limits.Gates.CommitGroup), as a database's
// group commit does. No outcome waits for another's request.
type commitGroup struct {
	gates *limits.Gates
	keys  limits.GateKeys

	mu      sync.Mutex
	waiting []*groupCommit
	writing bool
}

type groupCommit struct {
	o    limits.Outcome
	c    limits.Committed
	err  error
	done chan struct{}
}

func (g *commitGroup) commit(ctx context.Context, o limits.Outcome) (limits.Committed, error) {
	p := &groupCommit{o: o, done: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, p)
	lead := !g.writing
	g.writing = true
	g.mu.Unlock()
	if lead {
		g.write(ctx)
	}
	<-p.done
	return p.c, p.err
}

// write commits what waits, group after group, until nothing does.
func (g *commitGroup) write(ctx context.Context) {
	for {
		g.mu.Lock()
		ps := g.waiting
		g.waiting = nil
		if len(ps) == 0 {
			g.writing = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		os := make([]limits.Outcome, len(ps))
		for i, p := range ps {
			os[i] = p.o
		}
		cs, err := g.gates.CommitGroup(ctx, g.keys, os)
		for i, p := range ps {
			if p.err = err; err == nil {
				p.c = cs[i]
			}
			close(p.done)
		}
	}
}
