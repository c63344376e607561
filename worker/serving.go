package worker

import (
	"context"
	"time"
)

// A worker serving a region (its dispatcher runs) writes its id to the
// region's Serving key every servingEvery, to lapse servingTTL later: a
// publish sees whether a worker will take what it hands to asynq at once,
// and with none it batches a subscriber's events after the first
// (producer/serving.go). A worker that stops leaves the key to lapse
// (another may still serve the region). One command a region every
// servingEvery: deploy/BENCHMARKS.md, "Idle cost".
const (
	servingEvery = 2 * time.Second
	servingTTL   = 5 * time.Second
)

// markServing keeps region d's Serving key until d's loop ends; start
// wrote it first.
func (ds *dispatchers) markServing(d *dispatcher) {
	t := time.NewTicker(servingEvery)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
		}
		ds.markServed(d)
	}
}

// markServed writes region d's Serving key once.
func (ds *dispatchers) markServed(d *dispatcher) {
	h := ds.h
	ctx, cancel := context.WithTimeout(d.ctx, servingEvery)
	defer cancel()
	if err := h.rdb.Set(ctx, h.keys.Serving(d.region), ds.id, servingTTL).Err(); err != nil && d.ctx.Err() == nil {
		h.log.Debug("could not mark the region served; publishes batch meanwhile", "region", d.region, "err", err)
	}
}
