package loadtest

import (
	"context"
	"log/slog"
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

// queuesOf are namespace ns's delivery queues (default region) and its
// legacy one, as many as its layout says.
func (e *env) queuesOf(ctx context.Context, ns string) []string {
	keys := tasks.Keys(ns)
	shards, err := e.rdb.HGet(ctx, keys.Layout(), "shards").Int()
	if err != nil || shards < 1 {
		shards = 1
	}
	qs := []string{keys.LegacyQueue()}
	for i := range shards {
		qs = append(qs, keys.ShardQueue("", tasks.LaneFresh, i), keys.ShardQueue("", tasks.LaneBacklog, i))
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
