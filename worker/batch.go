package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
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
	sub, err := h.subscriberToAdmit(ctx, d.SubscriberID)
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
	keys, gates := h.keys.Gates(d.SubscriberID), h.gatesOf(b)
	calls := newBatchCalls(len(d.EventIDs),
		func(ctx context.Context, rs []limits.AdmitRequest) ([]limits.Admission, error) {
			return gates.AdmitGroup(ctx, keys, rs)
		},
		func(ctx context.Context, os []limits.Outcome) ([]limits.Committed, error) {
			return gates.CommitGroup(ctx, keys, os)
		},
		func(ctx context.Context, ats []time.Time) ([]struct{}, error) {
			return make([]struct{}, len(ats)), h.gates.Notify(ctx, h.keys.Ready(h.keys.QueueRegion(b.queue)), d.SubscriberID, slices.MinFunc(ats, time.Time.Compare))
		})
	for i, ev := range d.EventIDs {
		r := calls.newRun(&run{taskID: tasks.TaskID(d.SubscriberID, ev), queue: b.queue, sub: d.SubscriberID, event: ev, keys: keys})
		wg.Go(func() {
			defer calls.ended(r)
			answers[i] = h.deliver(ctx, r, sub)
		})
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
// together, as a database's group commit does: a call waits until every
// delivery of the batch that may still make one soon has made it (they go
// as one), or until linger has passed since the first of them; what is
// asked while a group is on its way goes in the next. Who may make one
// soon is the group's coming:
//
//   - for Admits, the deliveries that will ask without waiting for an
//     in-flight slot: each delivery before its first Admit (waited for up
//     to firstLinger: a delivery whose goroutine a busy process starts a
//     few milliseconds late still joins the batch's one Admit), and one
//     waiting for the rate slot it booked;
//   - for commits, the deliveries that hold an in-flight slot and have not
//     asked yet: their requests answer soon.
//
// A delivery waiting for an in-flight slot is waited for by neither: the
// slot it waits for may be the one the waiting call is to free. So a batch
// whose requests answer together commits once, one whose endpoint takes
// one request at a time commits and admits each at once, and no call
// waits more than linger for another delivery.
type group[In, Out any] struct {
	send   func(context.Context, []In) ([]Out, error)
	linger time.Duration
	// coming: how many deliveries may still make a call soon
	// (batchCalls.toAdmit, batchCalls.held)
	coming func() int64
	// first calls (0: none) are waited for up to firstLinger
	first       int
	firstLinger time.Duration

	mu      sync.Mutex
	asked   int // calls made
	waiting []*groupCall[In, Out]
	sending bool
	kick    chan struct{} // a call was made or a delivery ended: look again
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
	g.asked++
	lead := !g.sending
	g.sending = true
	g.mu.Unlock()
	g.wake()
	if lead {
		g.drain(ctx)
	}
	<-c.done
	return c.out, c.err
}

// wake tells a leader waiting for the others to look again.
func (g *group[In, Out]) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// drain sends what waits, group after group, until nothing does.
func (g *group[In, Out]) drain(ctx context.Context) {
	for {
		g.gather()
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

// gather waits until no delivery that may still make a call soon
// (coming) has not made it, or linger has passed (none: the ready index's
// writes, which nothing after them waits for).
func (g *group[In, Out]) gather() {
	var timer *time.Timer
	for {
		g.mu.Lock()
		n, linger := int64(len(g.waiting)), g.linger
		if g.asked < g.first {
			linger = g.firstLinger
		}
		g.mu.Unlock()
		if n == 0 || linger <= 0 || g.coming() <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(linger)
		}
		select {
		case <-g.kick:
			continue
		case <-timer.C:
			return
		}
	}
	if timer != nil {
		timer.Stop()
	}
}

// batchCalls are a batch's grouped script calls.
type batchCalls struct {
	// toAdmit: its deliveries that will ask Admit without waiting for an
	// in-flight slot (run.toAdmit); held: those that hold one (admitted)
	// and have not asked for their commit yet (run.held)
	toAdmit, held atomic.Int64
	// inRoom: its deliveries waiting in their destination's busy lane, in
	// the one place of the room they share (lane's)
	roomMu   sync.Mutex
	inRoom   int
	lane     *lane
	admits   group[limits.AdmitRequest, limits.Admission]
	commits  group[limits.Outcome, limits.Committed]
	notifies group[time.Time, struct{}] // the ready index told (ZADD LT: the earliest counts)
}

// The longest a batch's Admit and commit wait for the batch's other
// deliveries to ask too (group.gather): a fraction of a request, a few
// round trips; the batch's first Admits, which every delivery makes at
// once, firstAdmitLinger.
const (
	admitLinger      = 2 * time.Millisecond
	firstAdmitLinger = 20 * time.Millisecond
	commitLinger     = 5 * time.Millisecond
)

// newBatchCalls are the grouped calls of n deliveries, each of which is to
// be run with newRun, sent with send's.
func newBatchCalls(n int, admit func(context.Context, []limits.AdmitRequest) ([]limits.Admission, error),
	commit func(context.Context, []limits.Outcome) ([]limits.Committed, error),
	notify func(context.Context, []time.Time) ([]struct{}, error)) *batchCalls {
	c := &batchCalls{}
	c.toAdmit.Store(int64(n)) // (newRun)
	c.admits = group[limits.AdmitRequest, limits.Admission]{send: admit, linger: admitLinger, coming: c.toAdmit.Load,
		kick: make(chan struct{}, 1), first: n, firstLinger: firstAdmitLinger}
	c.commits = group[limits.Outcome, limits.Committed]{send: commit, linger: commitLinger, coming: c.held.Load,
		kick: make(chan struct{}, 1)}
	c.notifies = group[time.Time, struct{}]{send: notify, kick: make(chan struct{}, 1)}
	return c
}

// newRun is one of the batch's deliveries, before its first Admit: one
// of the n that toAdmit counts from the start (so that one whose goroutine
// starts late is waited for).
func (c *batchCalls) newRun(r *run) *run {
	r.batch, r.toAdmit = c, true
	return r
}

// admit sends r's Admit with the batch's others, and keeps count of what
// r does next: it holds a slot (admitted), or asks again after the rate
// slot it booked (SendIn); else (parked, busy: a wait for an in-flight
// slot) nothing of it is waited for.
func (c *batchCalls) admit(ctx context.Context, r *run, req limits.AdmitRequest) (limits.Admission, error) {
	c.asks(r)
	a, err := c.admits.call(ctx, req)
	switch {
	case err != nil:
	case a.Admitted:
		if !r.held {
			r.held = true
			c.held.Add(1)
		}
	case a.SendIn > 0:
		r.toAdmit = true
		c.toAdmit.Add(1)
	}
	return a, err
}

// commit sends r's commit with the batch's others.
func (c *batchCalls) commit(ctx context.Context, r *run, o limits.Outcome) (limits.Committed, error) {
	c.asks(r)
	return c.commits.call(ctx, o)
}

// asks: r makes a call, or ends; what it was waited for, it is not now.
func (c *batchCalls) asks(r *run) {
	if r.toAdmit {
		r.toAdmit = false
		c.toAdmit.Add(-1)
	}
	if r.held {
		r.held = false
		c.held.Add(-1)
	}
}

// ended: one of the batch's deliveries is done; its groups need not wait
// for it.
func (c *batchCalls) ended(r *run) {
	c.asks(r)
	c.admits.wake()
	c.commits.wake()
	c.notifies.wake()
}

// enterRoom takes r's place in its destination's busy lane (waitRoom): a
// task's own, or its batch's, which the batch's waiting deliveries share,
// as they share the one handler their task holds.
func (h *handler) enterRoom(r *run) (*lane, bool) {
	c := r.batch
	if c == nil {
		return h.room.enter(r.sub)
	}
	c.roomMu.Lock()
	defer c.roomMu.Unlock()
	if c.inRoom > 0 {
		h.room.join(c.lane)
		c.inRoom++
		return c.lane, true
	}
	l, ok := h.room.enter(r.sub)
	if ok {
		c.lane, c.inRoom = l, 1
	}
	return l, ok
}

// leaveRoom takes r out of lane l, and its place with the last of a batch.
func (h *handler) leaveRoom(r *run, l *lane) {
	c := r.batch
	if c == nil {
		h.room.leave(r.sub, l, true)
		return
	}
	c.roomMu.Lock()
	defer c.roomMu.Unlock()
	c.inRoom--
	h.room.leave(r.sub, l, c.inRoom == 0)
}
