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

// markServed writes region d's Serving key once: when its loop starts,
// then every servingEvery until it ends (dispatchers.start).
func (ds *dispatchers) markServed(d *dispatcher) {
	h := ds.h
	ctx, cancel := context.WithTimeout(d.ctx, servingEvery)
	defer cancel()
	if err := h.rdb.Set(ctx, h.keys.Serving(d.region), ds.id, servingTTL).Err(); err != nil && d.ctx.Err() == nil {
		h.log.Debug("could not mark the region served; publishes batch meanwhile", "region", d.region, "err", err)
	}
}
