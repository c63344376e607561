package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// dispatchers hand parked deliveries to asynq when their destinations can
// take them (limits/doc.go): one loop per region this worker serves, each
// claiming the subscribers whose turn is due in its region's ready index,
// running their turns (limits.Turn) and enqueueing what they hand out.
// Several workers' dispatchers share a region: each turn is claimed by one.
type dispatchers struct {
	h      *handler
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	loops  map[string]*dispatcher // region → its loop
	id     string                 // holds the regions' rescuer leases (rescuer.go)
}

type dispatcher struct {
	region  string
	ctx     context.Context // ends when its region is let go or the worker stops
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{} // this process freed a slot or parked a delivery
	mu      sync.Mutex
	sleepTo time.Time // when the loop means to look next
}

func newDispatchers(h *handler) *dispatchers {
	ctx, cancel := context.WithCancel(context.Background())
	return &dispatchers{h: h, ctx: ctx, cancel: cancel, loops: map[string]*dispatcher{}, id: newRescuerID()}
}

// start runs region's loop, once.
func (ds *dispatchers) start(region string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.loops[region] != nil || ds.ctx.Err() != nil {
		return
	}
	d := &dispatcher{region: region, wake: make(chan struct{}, 1), done: make(chan struct{})}
	d.ctx, d.cancel = context.WithCancel(ds.ctx)
	ds.loops[region] = d
	// Before the region's Servers start: a publish from now on sees a
	// worker take what it hands to asynq (serving.go).
	ds.markServed(d)
	var aside sync.WaitGroup
	aside.Go(func() { ds.rescue(d) })
	aside.Go(func() { every(d.ctx, servingEvery, func() { ds.markServed(d) }) })
	ds.wg.Add(1)
	go func() {
		defer ds.wg.Done()
		defer close(d.done)
		defer aside.Wait()
		ds.run(d)
	}()
}

// stopRegion ends region's loop, if this worker runs it, and waits for it.
func (ds *dispatchers) stopRegion(region string) {
	ds.mu.Lock()
	d := ds.loops[region]
	delete(ds.loops, region)
	ds.mu.Unlock()
	if d != nil {
		d.cancel()
		<-d.done
	}
}

// stop ends the loops and waits for them.
func (ds *dispatchers) stop() {
	ds.cancel()
	ds.wg.Wait()
}

// poke wakes region's loop, if this worker runs it, when a turn is due by
// at sooner than it means to look.
func (ds *dispatchers) poke(region string, at time.Time) {
	if ds == nil {
		return
	}
	if region == "" {
		region = tasks.DefaultRegion
	}
	ds.mu.Lock()
	d := ds.loops[region]
	ds.mu.Unlock()
	if d == nil {
		return
	}
	d.mu.Lock()
	soon := at.Before(d.sleepTo)
	d.mu.Unlock()
	if soon {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// claimBatch is the most subscribers one claim takes.
const claimBatch = 64

func (ds *dispatchers) run(d *dispatcher) {
	h := ds.h
	ready, claimed := h.keys.Ready(d.region), h.keys.Claimed(d.region)
	var busy time.Time // when the loop last claimed a turn or was woken
	for backoff := time.Duration(0); ; {
		subs, next, err := h.gates.Claim(d.ctx, ready, claimed, claimBatch)
		switch {
		case d.ctx.Err() != nil:
			return
		case err != nil:
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			h.log.Warn("dispatcher: could not claim turns; trying again", "region", d.region, "err", err, "in", backoff)
			if !sleep(d.ctx, backoff) {
				return
			}
			continue
		}
		backoff = 0
		if len(subs) > 0 {
			busy = time.Now()
			ds.turns(d, subs)
			continue // more may be due
		}
		// Notifications from other processes are seen this often: every
		// busyPoll while the region is busy, every PollInterval once it
		// has been quiet for busyFor.
		wait := h.cfg.PollInterval
		if time.Since(busy) < busyFor {
			wait = min(wait, busyPoll)
		}
		if !next.IsZero() {
			wait = min(wait, max(time.Until(next), 0))
		}
		d.mu.Lock()
		d.sleepTo = time.Now().Add(wait)
		d.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-d.ctx.Done():
			t.Stop()
			return
		case <-d.wake:
			busy = time.Now()
		case <-t.C:
		}
		t.Stop()
	}
}

// A dispatcher that claimed a turn or was woken less than busyFor ago
// looks at its ready index at least every busyPoll; an idle one, every
// Config.PollInterval.
const (
	busyPoll = 100 * time.Millisecond
	busyFor  = 10 * time.Second
)

// turns runs the claimed subscribers' turns side by side (their scripts
// share round trips: deploy.AutoPipeline), enqueues what they hand out and
// gives each its next turn.
func (ds *dispatchers) turns(d *dispatcher, subs []string) {
	h := ds.h
	ctx := context.WithoutCancel(ds.ctx) // a claimed turn is finished, even while stopping
	next := make([]time.Time, len(subs))
	var wg sync.WaitGroup
	for i, id := range subs {
		wg.Go(func() { next[i] = ds.turn(ctx, d.region, id) })
	}
	wg.Wait()
	if err := h.gates.Release(ctx, h.keys.Ready(d.region), h.keys.Claimed(d.region), subs, next); err != nil {
		// The claims lapse by themselves and the turns come again.
		h.log.Warn("dispatcher: could not release its turns; they come again after the claim's lease", "region", d.region, "err", err)
	}
}

// turn runs one subscriber's turn and returns when it needs the next.
func (ds *dispatchers) turn(ctx context.Context, region, id string) time.Time {
	h := ds.h
	sub, err := h.subscriber(ctx, id, "")
	switch {
	case errors.Is(err, errDeleted):
		sub = cachedSub{Subscriber: tasks.Subscriber{ID: id, Limit: limits.DefaultLimit, MaxInFlight: 1}}
	case err != nil:
		return time.Now().Add(time.Second)
	}
	if r := cmpRegion(sub.Region); r != region {
		// Moved to another region: its dispatchers hand it out there.
		if err := h.gates.Notify(ctx, h.keys.Ready(r), id, time.Time{}); err != nil {
			return time.Now().Add(time.Second)
		}
		return time.Time{}
	}
	probeHold := h.cfg.RequestTimeout + h.cfg.maxWait() + 5*time.Second
	var tr limits.TurnResult
	pace := h.pace(&sub.Subscriber)
	if h.flows.flooding(ctx, id) {
		pace.FreshMax = -1 // its tenant's past its fresh rate: the backlog lane
	}
	err = fault(ctx, FaultTurn, func() (err error) {
		tr, err = h.gates.Turn(ctx, h.keys.Gates(id), pace, probeHold)
		return err
	})
	if err != nil {
		h.log.Warn("dispatcher: turn failed; trying again", "subscriber_id", id, "err", err)
		return time.Now().Add(time.Second)
	}
	if tr.Dropped > 0 {
		h.stats.Dropped.Add(int64(tr.Dropped))
		h.totals.count(DroppedDeleted, int64(tr.Dropped))
	}
	h.rescued(id, RescuedStale, int64(tr.Stale))
	// Enqueued side by side, so that they share round trips; one that is
	// not waits in the lot's hand-outs until its lease ends, and the next
	// turn hands it out again.
	var wg sync.WaitGroup
	sem := make(chan struct{}, handOutsAtOnce)
	for _, g := range batches(tr.Handouts, h.cfg.BatchMax) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var enqueued bool
			err := fault(ctx, FaultEnqueue, func() (err error) {
				if len(g) > 1 {
					enqueued, err = h.prod.HandOutBatch(ctx, sub.Subscriber, eventIDs(g), g[0].Lane, h.shards)
				} else {
					enqueued, err = h.prod.HandOut(ctx, sub.Subscriber, g[0].EventID, g[0].Lane, h.shards, true)
				}
				return err
			})
			switch {
			case err != nil:
				h.log.Warn("dispatcher: could not enqueue a hand-out; it is handed out again after its lease", "subscriber_id", id,
					"event_id", g[0].EventID, "deliveries", len(g), "err", err)
			case !enqueued:
				// its task is still in asynq (a killed run's, which asynq's
				// lease recovery runs again): nothing was lost
			case len(g) > 1:
				if s := h.srvs.Load(); s != nil {
					s.handedOut(cmpRegion(sub.Region), g[0].Lane)
				}
			case g[0].Lost:
				h.rescued(id, RescuedLostRun, 1)
			case g[0].Again:
				h.rescued(id, RescuedLostTask, 1)
			}
		})
	}
	wg.Wait()
	h.flows.add(ctx, id, len(tr.Handouts))
	h.stats.HandedOut.Add(int64(len(tr.Handouts)))
	return tr.Next
}

// batches groups a turn's hand-outs into the tasks they go as: the due
// ones of a lane in batches of at most most, in the turn's order; each
// other (the open breaker's probe, one handed out again because its
// hand-out's lease ran out or its run's worker died) alone, under its own
// task id, which asynq refuses while a task of it is still there.
func batches(hs []limits.Handout, most int) [][]limits.Handout {
	var out [][]limits.Handout
	open := map[string]int{} // lane → its batch being filled, in out
	for _, o := range hs {
		if o.Probe || o.Again || o.Lost {
			out = append(out, []limits.Handout{o})
			continue
		}
		i, ok := open[o.Lane]
		if !ok || len(out[i]) >= most {
			i = len(out)
			open[o.Lane] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], o)
	}
	return out
}

func eventIDs(hs []limits.Handout) []string {
	ids := make([]string, len(hs))
	for i, o := range hs {
		ids[i] = o.EventID
	}
	return ids
}

// handOutsAtOnce is how many of a turn's hand-outs are enqueued at once.
const handOutsAtOnce = 64

// cmpRegion is a subscriber's region as queues and ready indexes name it.
func cmpRegion(r string) string {
	if r == "" {
		return tasks.DefaultRegion
	}
	return r
}
