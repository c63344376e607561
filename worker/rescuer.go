package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
)

// Why the rescuer, or a turn, moved a delivery that nothing was moving
// (counted namespace-wide as "rescued:<why>", /metrics'
// hooklane_rescued_total{reason}).
const (
	// RescuedNoTurn: a subscriber had deliveries overdue in its lot, out or
	// runs and no turn claimed or due soon in its region's ready index (a
	// ready write lost with a process that died after its script): given
	// one.
	RescuedNoTurn = "no_turn"
	// RescuedLostRun: a run's worker died and nothing else held its
	// delivery (its task was let go, or a rerun found the slots full):
	// handed out again, its lost request counted by the next run. (A run
	// whose task asynq still has is handed out too, to no effect: asynq
	// refuses the second task and runs its own again; that is not
	// counted.)
	RescuedLostRun = "lost_run"
	// RescuedLostTask: a hand-out's lease ran out and its task was not in
	// asynq (lost with the process that was to enqueue it): enqueued again.
	RescuedLostTask = "lost_task"
	// RescuedStale: an entry of out or runs whose delivery had ended (or
	// whose record was gone or another generation's): dropped.
	RescuedStale = "stale"
)

// rescueGrace is how long past its time a delivery may wait for its turn
// before the rescuer gives its subscriber one: a write of the ready index
// that follows its script (a publish's, a run's) is never that late.
const rescueGrace = 5 * time.Second

// rescued counts n deliveries of subscriber sub moved for reason.
func (h *handler) rescued(sub, reason string, n int64) {
	if n <= 0 {
		return
	}
	h.totals.count("rescued:"+reason, n)
	h.log.Warn("rescued deliveries that nothing was moving", "subscriber_id", sub, "reason", reason, "count", n)
}

// rescue is region's rescuer, as asynq's recoverer and river's job
// rescuer are: every RescueInterval the worker holding the region's lease
// looks at the next batch of subscribers (a cursor over every subscriber
// id, sized so that a sweep takes RescueSweep) and gives a turn to each
// whose deliveries are overdue without one claimed or due within
// rescueGrace (a later one is what a lost write of the ready index left:
// the write that was to bring it forward), or that was
// resumed more than rescueGrace ago with no turn since (its ready entry
// may be the far horizon of its paused schedule). The turn then
// moves them (limits.Turn: a lost run or task handed out again, an ended
// one dropped). Its cost is one script per subscriber per sweep, whatever
// the number of deliveries parked: deploy/BENCHMARKS.md states it.
func (ds *dispatchers) rescue(d *dispatcher) {
	every(d.ctx, ds.h.cfg.RescueInterval, func() {
		if _, err := ds.rescuePass(d.ctx, d.region); err != nil && d.ctx.Err() == nil {
			ds.h.log.Warn("rescuer: pass failed; it tries again", "region", d.region, "err", err)
		}
	})
}

// rescuePass runs one pass of region's rescuer, if this worker holds its
// lease, and returns how many subscribers it gave a turn.
func (ds *dispatchers) rescuePass(ctx context.Context, region string) (int, error) {
	h := ds.h
	if ok, err := h.gates.Lease(ctx, h.keys.Rescuer(region), ds.id, 2*h.cfg.RescueInterval); err != nil || !ok {
		return 0, err
	}
	var count *redis.IntCmd
	var cursor *redis.StringCmd
	if _, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		count, cursor = p.ZCard(ctx, h.keys.SubscriberIDs()), p.Get(ctx, h.keys.RescuerCursor(region))
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	passes := max(int64(h.cfg.RescueSweep/h.cfg.RescueInterval), 1)
	batch := min(max((count.Val()+passes-1)/passes, 20), 1000)
	from := "-"
	if c := cursor.Val(); c != "" {
		from = "(" + c
	}
	ids, err := h.rdb.ZRangeByLex(ctx, h.keys.SubscriberIDs(), &redis.ZRangeBy{Min: from, Max: "+", Count: batch}).Result()
	if err != nil {
		return 0, err
	}
	next := ""
	if int64(len(ids)) == batch {
		next = ids[len(ids)-1]
	}
	if err := h.rdb.Set(ctx, h.keys.RescuerCursor(region), next, 0).Err(); err != nil {
		return 0, err
	}
	overdue, woken := make([]bool, len(ids)), make([]bool, len(ids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			w, late, err := h.gates.Overdue(ctx, h.keys.Gates(id), rescueGrace)
			overdue[i], woken[i] = err == nil && late, err == nil && w
		})
	}
	wg.Wait()
	ready, claimed := h.keys.Ready(region), h.keys.Claimed(region)
	rescued := 0
	for i, id := range ids {
		if !overdue[i] {
			continue
		}
		if sub, err := h.subscriber(ctx, id, ""); err != nil || cmpRegion(sub.Region) != region {
			continue // deleted meanwhile, or another region's rescuer's
		}
		var r, c *redis.FloatCmd
		_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			r, c = p.ZScore(ctx, ready, id), p.ZScore(ctx, claimed, id)
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return rescued, err
		}
		soon := float64(time.Now().Add(rescueGrace).UnixMilli())
		if c.Err() == nil || r.Err() == nil && r.Val() <= soon {
			continue // a turn is under way, or due soon
		}
		if err := h.gates.Notify(ctx, ready, id, time.Time{}); err != nil {
			return rescued, err
		}
		h.rescued(id, RescuedNoTurn, 1)
		h.disp.poke(region, time.Now())
		rescued++
	}
	return rescued, nil
}

// newRescuerID names this worker's hold of the rescuers' leases.
func newRescuerID() string { return limits.NewToken() }
