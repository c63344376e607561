package producer

import (
	"context"
	"sync"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// served is what a Producer (and its tenants') knows of which regions a
// worker serves (tasks.Keys.Serving), each read at most every servedFor.
//
// Why: a publish hands a subscriber's new event to asynq at once, as a
// task of its own, while fewer than Config.BatchAfter of its deliveries
// wait there, so that a worker takes it at once. With no worker serving
// the region (all stopped or crashed, none started yet) nothing takes it
// at once, and a backlog built so would be drained a task a delivery, the
// dearest way (deploy/BENCHMARKS.md, "Batches"). So while none is seen,
// a subscriber's event goes at once only when nothing of it waits there
// (limits.Pace.BatchAfter 1), and the rest join its lot, which the first
// worker's turns hand out in batches.
type served struct {
	mu sync.Mutex
	m  map[string]servedSeen // region → what was read
}

type servedSeen struct {
	yes bool
	at  time.Time
}

// servedFor is how long a read of a region's Serving key is used.
const servedFor = time.Second

// serves reports whether a worker serves region, as last read; a failed
// read says yes (the event goes as it would with a worker).
func (p *Producer) serves(ctx context.Context, region string) bool {
	if region == "" {
		region = tasks.DefaultRegion
	}
	p.served.mu.Lock()
	seen, ok := p.served.m[region]
	p.served.mu.Unlock()
	if ok && time.Since(seen.at) < servedFor {
		return seen.yes
	}
	n, err := p.rdb.Exists(ctx, p.keys.Serving(region)).Result()
	seen = servedSeen{yes: err != nil || n > 0, at: time.Now()}
	p.served.mu.Lock()
	p.served.m[region] = seen
	p.served.mu.Unlock()
	return seen.yes
}

// bookingPace is pace for a publish's booking of subscriber s: with no
// worker serving its region, its event goes to asynq at once only when
// none of its deliveries waits there (see served), unless BatchAfter is
// off (negative: every event that can go at once goes alone).
func (p *Producer) bookingPace(ctx context.Context, s tasks.Subscriber, flood bool) limits.Pace {
	pace := p.pace(s, flood)
	if pace.BatchAfter > 0 && !p.serves(ctx, s.Region) {
		pace.BatchAfter = 1
	}
	return pace
}
