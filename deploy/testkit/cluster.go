package testkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
)

// MasterForKey names the master that serves key, as the cluster itself
// says (CLUSTER KEYSLOT and CLUSTER SLOTS on the first node that answers),
// not as a client under test believes.
func MasterForKey(ctx context.Context, c *deploy.Cluster, key string) (string, error) {
	var errs []error
	for _, addr := range c.Addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
		master, err := masterForKey(ctx, rdb, key)
		rdb.Close()
		if err == nil {
			return master, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return "", errors.Join(errs...)
}

func masterForKey(ctx context.Context, rdb *redis.Client, key string) (string, error) {
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil // the first node of a range is its master
		}
	}
	return "", fmt.Errorf("no node serves slot %d", slot)
}
