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
	cfg   Config
	rdb   redis.UniversalClient
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
	shards, err := e.rdb.HGet(ctx, keys.Layout(), "shards").Int()
	if err != nil || shards < 1 {
		shards = 1
	}
	regions := []string{tasks.DefaultRegion}
	if named, err := e.rdb.SMembers(ctx, keys.Regions()).Result(); err == nil {
		slices.Sort(named)
		for _, r := range named {
			if !slices.Contains(regions, r) {
				regions = append(regions, r)
			}
		}
	}
	qs := []string{keys.LegacyQueue()}
	for _, r := range regions {
		for i := range shards {
			qs = append(qs, keys.ShardQueue(r, tasks.LaneFresh, i), keys.ShardQueue(r, tasks.LaneBacklog, i))
		}
	}
	return qs
}

// settled reports whether queues have nothing left to run.
func (e *env) settled(ctx context.Context, queues []string) bool {
	q, err := backlog(ctx, e.rdb, queues)
	return err == nil && q.Backlog() == 0
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
