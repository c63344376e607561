package worker

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// A worker configured with Regions serves those. One serving every region
// serves the default region, the regions the namespace's subscribers name
// (producer.Regions: at most producer.Config.MaxRegions) and any region
// whose delivery queues still hold a task (asynq's set of queues: a task
// of a deleted or moved subscriber, or one a publish enqueued while its
// region was being let go, is delivered or dropped, never stranded).
//
// It lets go of a region that no subscriber names once, at two checks in a
// row (Config.RegionCheck apart), its queues and its ready index are
// empty: it deletes the region's count (producer.PruneRegion, which
// refuses if a subscriber named it meanwhile) and stops its Servers and
// dispatcher; every other worker stops them at its next check. An idle
// region so stops costing anything within two or three checks (30 s with
// the default 10 s).

// regions are the regions a worker serves now: its configured ones, or
// the default one, every region subscribers name and every one whose
// queues hold a task. counts, when not nil, gets the subscriber counts.
func (w *Worker) regions(ctx context.Context, counts map[string]int) ([]string, error) {
	if len(w.cfg.Regions) > 0 {
		return w.cfg.Regions, nil
	}
	named, err := w.h.prod.Regions(ctx)
	if err != nil {
		return nil, err
	}
	out := []string{tasks.DefaultRegion}
	for r, n := range named {
		if counts != nil {
			counts[r] = n
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	strays, err := w.regionsWithTasks(ctx, out)
	if err != nil {
		return nil, err
	}
	out = append(out, strays...)
	slices.Sort(out)
	return out, nil
}

// regionsWithTasks are the regions, other than known, of the namespace's
// delivery queues (this release's or the one before's) that hold a task.
func (w *Worker) regionsWithTasks(ctx context.Context, known []string) ([]string, error) {
	all, err := w.rdb.SMembers(ctx, tasks.AsynqQueues).Result()
	if err != nil {
		return nil, err
	}
	byRegion := map[string][]string{}
	for _, q := range all {
		if r := w.h.keys.QueueRegion(q); w.h.keys.OwnsQueue(q) && !slices.Contains(known, r) {
			byRegion[r] = append(byRegion[r], q)
		}
	}
	var out []string
	for r, qs := range byRegion {
		n, err := w.queuedIn(ctx, qs)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// queuedIn counts the tasks in queues qs (pending, active, scheduled,
// retrying), in one round trip.
func (w *Worker) queuedIn(ctx context.Context, qs []string) (int64, error) {
	var sizes []*redis.IntCmd
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, q := range qs {
			pending, active, scheduled, retry := tasks.AsynqQueueKeys(q)
			sizes = append(sizes, p.LLen(ctx, pending), p.LLen(ctx, active), p.ZCard(ctx, scheduled), p.ZCard(ctx, retry))
		}
		return nil
	})
	var n int64
	for _, c := range sizes {
		n += c.Val()
	}
	return n, err
}

// regionIdle reports whether region, which no subscriber names, has
// nothing queued and nothing parked: its queues (both lanes, every shard,
// and the release before's) and its ready index are empty.
func (w *Worker) regionIdle(ctx context.Context, region string, shards int) (bool, error) {
	var qs []string
	for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
		for i := range shards {
			qs = append(qs, w.h.keys.ShardQueue(region, lane, i), w.h.keys.LegacyQueue(region, lane, i))
		}
	}
	n, err := w.queuedIn(ctx, qs)
	if err != nil || n > 0 {
		return false, err
	}
	var ready *redis.StringSliceCmd
	var claimed *redis.IntCmd
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		ready, claimed = p.ZRange(ctx, w.h.keys.Ready(region), 0, -1), p.ZCard(ctx, w.h.keys.Claimed(region))
		return nil
	})
	if err != nil {
		return false, err
	}
	// With no subscriber in the region, an entry is a subscriber that
	// moved away or was deleted, due when its last turn here said (a
	// paused one's: its horizon): its turn now hands it to its new
	// region's dispatchers, or drops what a deleted one left.
	for _, id := range ready.Val() {
		if err := w.h.gates.Notify(ctx, w.h.keys.Ready(region), id, time.Time{}); err != nil {
			return false, err
		}
	}
	return len(ready.Val()) == 0 && claimed.Val() == 0, nil
}

// watchRegions, every Config.RegionCheck until ctx is done, stops the
// dequeue loops of lanes idle again (servers.go), starts the Servers of
// regions served from now on, stops those of regions let go, and starts a region's Server of the release before's queues once a task
// is found there (an older worker or producer still running during a
// rolling deploy).
func (w *Worker) watchRegions(ctx context.Context, s *servers) {
	t := time.NewTicker(w.cfg.RegionCheck)
	defer t.Stop()
	idleBefore := map[string]bool{} // regions without subscribers found idle at the last check
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.stopIdleExtras(extraLoopLinger)
		for _, r := range s.served() {
			if err := s.serveLegacy(ctx, r); err != nil {
				w.cfg.Logger.Warn("could not look for the release before's queued tasks", "region", r, "err", err)
			}
		}
		if len(w.cfg.Regions) > 0 {
			continue
		}
		counts := map[string]int{}
		want, err := w.regions(ctx, counts)
		if err != nil {
			w.cfg.Logger.Warn("could not read the regions to serve", "err", err)
			continue
		}
		idleNow := map[string]bool{}
		for r, n := range counts {
			if n > 0 || r == tasks.DefaultRegion {
				continue
			}
			idle, err := w.regionIdle(ctx, r, s.shards)
			if err != nil || !idle {
				continue
			}
			idleNow[r] = true
			if !idleBefore[r] {
				continue
			}
			if pruned, err := w.h.prod.PruneRegion(ctx, r); err != nil {
				w.cfg.Logger.Warn("could not let go of an idle region", "region", r, "err", err)
			} else if pruned {
				want = slices.DeleteFunc(want, func(x string) bool { return x == r })
				w.cfg.Logger.Info("no subscriber names region any more and its queues are empty: letting it go", "region", r)
			}
		}
		idleBefore = idleNow
		for _, r := range s.served() {
			if !slices.Contains(want, r) {
				s.stop(r)
				w.cfg.Logger.Info("stopped serving a region let go", "region", r)
			}
		}
		for _, r := range want {
			if slices.Contains(s.served(), r) {
				continue
			}
			if err := s.serve(r); err != nil {
				w.cfg.Logger.Error("could not serve a new region", "region", r, "err", err)
				continue
			}
			w.cfg.Logger.Info("serving a new region", "region", r)
		}
	}
}

// ServedRegions are the regions whose queues the worker serves now.
func (w *Worker) ServedRegions() []string {
	s := w.srvs.Load()
	if s == nil {
		return nil
	}
	return s.served()
}
