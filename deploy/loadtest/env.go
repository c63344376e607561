package loadtest

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// env is what every scenario shares: Redis, the receiver, the probe.
type env struct {
	cfg Config
	rdb redis.UniversalClient
	// obs is the client the harness looks at a scenario's queue with,
	// seen counting what it sends (observer.go); nil: rdb, uncounted.
	obs   redis.UniversalClient
	seen  *observer
	recv  *Receiver
	probe *lagProbe
	log   *slog.Logger
	// stalls of the harness process during the scenario being collected.
	stalls []stall
}

// queuesOf are namespace ns's delivery queues, both lanes of every shard
// its layout has in every region (the default one and each a subscriber
// names, as a worker serving every region finds them), and its legacy
// one.
func (e *env) queuesOf(ctx context.Context, ns string) []string {
	keys := tasks.Keys(ns)
	shards, err := e.look().HGet(ctx, keys.Layout(), "shards").Int()
	if err != nil || shards < 1 {
		shards = 1
	}
	regions := []string{tasks.DefaultRegion}
	if named, err := e.look().HKeys(ctx, keys.RegionSubscribers()).Result(); err == nil {
		slices.Sort(named)
		for _, r := range named {
			if !slices.Contains(regions, r) {
				regions = append(regions, r)
			}
		}
	}
	var qs []string
	for _, r := range regions {
		for i := range shards {
			qs = append(qs, keys.ShardQueue(r, tasks.LaneFresh, i), keys.ShardQueue(r, tasks.LaneBacklog, i))
		}
	}
	return qs
}

// stock is where a namespace's undelivered work sits: its asynq queues,
// and each subscriber's lot (parked, not handed out yet) and hand-outs
// (handed to asynq, not taken by a run yet, so a task may sit in both a
// queue and out, or for a moment in out alone).
type stock struct {
	queues, lots, outs []string
}

// look is the client the harness looks at the queues with.
func (e *env) look() redis.UniversalClient {
	if e.obs != nil {
		return e.obs
	}
	return e.rdb
}

// stockOf is namespace ns's stock: queuesOf and the schedule of every
// subscriber it has.
func (e *env) stockOf(ctx context.Context, ns string) stock {
	st := stock{queues: e.queuesOf(ctx, ns)}
	keys := tasks.Keys(ns)
	ids, _ := e.look().ZRange(ctx, keys.SubscriberIDs(), 0, -1).Result()
	for _, id := range ids {
		g := keys.Gates(id)
		st.lots, st.outs = append(st.lots, g.Lot), append(st.outs, g.Out)
	}
	return st
}

// onlyQueues is a stock of plain asynq queues (the floor's).
func onlyQueues(qs ...string) stock { return stock{queues: qs} }

// settled reports whether st has nothing left to run.
func (e *env) settled(ctx context.Context, st stock) bool {
	q, err := backlog(ctx, e.look(), st)
	return err == nil && q.Backlog() == 0 && q.handedOut == 0
}

// waitFor polls cond every 100ms until it holds (true) or timeout or ctx
// ends (false).
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
	return true
}
