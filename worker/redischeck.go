package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// CheckRedis returns what in Redis' configuration can lose tasks. asynq
// keeps a task in several keys: an eviction policy other than noeviction
// can drop one of them under memory pressure, leaving a task lost or
// half-stored; without AOF or RDB persistence a Redis restart empties every
// queue. The error is set when the configuration cannot be read (managed
// Redis services often refuse CONFIG).
func CheckRedis(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var policy, aof, save *redis.MapStringStringCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		policy = p.ConfigGet(ctx, "maxmemory-policy")
		aof = p.ConfigGet(ctx, "appendonly")
		save = p.ConfigGet(ctx, "save")
		return nil
	})
	if err != nil {
		return nil, err
	}
	var warnings []string
	if v := policy.Val()["maxmemory-policy"]; v != "noeviction" {
		warnings = append(warnings, fmt.Sprintf("maxmemory-policy is %q, not noeviction: Redis may evict task keys under memory pressure", v))
	}
	if aof.Val()["appendonly"] != "yes" && save.Val()["save"] == "" {
		warnings = append(warnings, "persistence is off (appendonly no, no save points): a Redis restart loses every queued event")
	}
	return warnings, nil
}

// warnAboutRedis logs CheckRedis' findings; it never stops the worker.
func (w *Worker) warnAboutRedis(ctx context.Context) {
	warnings, err := CheckRedis(ctx, w.rdb)
	if err != nil {
		w.cfg.Logger.Info("could not read Redis configuration; make sure maxmemory-policy is noeviction and persistence is on", "err", err)
		return
	}
	for _, msg := range warnings {
		w.cfg.Logger.Warn("redis configuration: " + msg)
	}
}
