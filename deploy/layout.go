package deploy

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// LayoutVersion is the key layout this release writes (tasks/keys.go).
// Version 1, the release before, kept subscribers in one hash and all
// deliveries in one queue; see Migrate.
const LayoutVersion = 2

// DefaultShards is the number of delivery queues per lane and region when
// a namespace is first used: one on a single Redis or a Sentinel-managed
// one, where more queues only cost dequeue round trips, and ClusterShards
// on a Redis Cluster, so that queue work spreads over its masters.
const (
	DefaultShards = 1
	ClusterShards = 6
)

// ErrLayout: a process was configured for a layout the namespace does not
// have.
var ErrLayout = errors.New("layout mismatch")

// Layout is a namespace's layout, as its first user wrote it.
type Layout struct {
	Version int
	Shards  int // delivery queues per lane and region
}

// EnsureLayout reads the namespace's layout, writing it first if no
// process did (shards: the count to write; 0 for DefaultShards). A process
// that asks for another shard count than the namespace has is refused:
// subscribers would move queues, and a re-published event would no longer
// meet its first task.
func EnsureLayout(ctx context.Context, rdb redis.UniversalClient, keys tasks.Keys, shards int) (Layout, error) {
	want := shards
	if _, cluster := rdb.(*redis.ClusterClient); want == 0 && cluster {
		want = ClusterShards
	} else if want == 0 {
		want = DefaultShards
	}
	if want < 1 || want > 256 {
		return Layout{}, fmt.Errorf("shards (HOOKLANE_QUEUE_SHARDS): want 1-256, not %d", shards)
	}
	k := keys.Layout()
	var ver, sh *redis.StringCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSetNX(ctx, k, "version", LayoutVersion)
		p.HSetNX(ctx, k, "shards", want)
		ver, sh = p.HGet(ctx, k, "version"), p.HGet(ctx, k, "shards")
		return nil
	})
	if err != nil {
		return Layout{}, err
	}
	l := Layout{}
	l.Version, _ = strconv.Atoi(ver.Val())
	l.Shards, _ = strconv.Atoi(sh.Val())
	if l.Shards < 1 {
		return l, fmt.Errorf("%w: namespace %s has an unreadable layout %q", ErrLayout, keys.Namespace(), sh.Val())
	}
	if shards != 0 && l.Shards != shards {
		return l, fmt.Errorf("%w: HOOKLANE_QUEUE_SHARDS is %d, but namespace %s was created with %d queues per lane; "+
			"leave it unset to use the namespace's, or see deploy/CONFIGURATION.md (Scaling out) on changing it", ErrLayout, shards, keys.Namespace(), l.Shards)
	}
	return l, nil
}
