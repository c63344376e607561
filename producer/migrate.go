package producer

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// MigrationReport says what Migrate carried over from the release before.
type MigrationReport struct {
	// Subscribers whose leftovers of the release before were deleted.
	Subscribers int `json:"subscribers"`
}

// Migrate carries a namespace written by the release before (layout 2)
// over to this one. Everything that release kept per subscriber is read as
// it is (the directory, gate records, limiter state, cooldowns, delivery
// records, dead letters; its stored events and dead letters' attempt lists
// are read where they are until they expire or are replayed), and its
// queued tasks are adopted one by one by the workers that serve its queues
// (worker/legacy.go). What is left to do is to delete what this release no
// longer reads and nothing expires: each subscriber's waiting index and
// pacing cursor, and its namespace counters, which move to the totals'
// slot; and to count the subscribers of each region (that release kept a
// set of every region ever named, which Migrate run again deletes). Workers run it at start, once per namespace;
// `hooklane migrate` (again) runs it after the release before's web
// processes are gone, for what they wrote meanwhile. It is safe to run any
// number of times, by several processes at once, and costs a round trip
// per 500 subscribers.
func (p *Producer) Migrate(ctx context.Context, again bool) (MigrationReport, error) {
	var rep MigrationReport
	if done, err := p.rdb.HGet(ctx, p.keys.Layout(), "v4").Result(); err == nil && done == "1" && !again {
		return rep, nil
	}
	for after := "-"; ; {
		ids, err := p.rdb.ZRangeByLex(ctx, p.keys.SubscriberIDs(), &redis.ZRangeBy{Min: after, Max: "+", Count: 500}).Result()
		if err != nil {
			return rep, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		if len(ids) == 0 {
			break
		}
		if _, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, id := range ids {
				pl.Del(ctx, p.keys.LegacyLeftovers(id)...)
			}
			return nil
		}); err != nil {
			return rep, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		rep.Subscribers += len(ids)
		after = "(" + ids[len(ids)-1]
	}
	if err := p.mergeLegacyCounters(ctx); err != nil {
		return rep, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if err := p.rebuildRegions(ctx); err != nil {
		return rep, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if again {
		// The release before's workers, which read it, are gone.
		if err := p.rdb.Del(ctx, p.keys.LegacyRegions()).Err(); err != nil {
			return rep, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
	}
	if err := p.rdb.HSet(ctx, p.keys.Layout(), "v4", "1").Err(); err != nil {
		return rep, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return rep, nil
}

// mergeLegacyCounters adds the release before's namespace counters to
// Counters once (its field merged:v2 says it was done, so a run cut before
// the delete does not add them twice) and deletes them.
func (p *Producer) mergeLegacyCounters(ctx context.Context) error {
	old, err := p.rdb.HGetAll(ctx, p.keys.LegacyCounters()).Result()
	if err != nil || len(old) == 0 {
		return err
	}
	args := make([]any, 0, 2*len(old))
	for f, v := range old {
		args = append(args, f, v)
	}
	if err := mergeCountersScript.Run(ctx, p.rdb, []string{p.keys.Counters()}, args...).Err(); err != nil {
		return err
	}
	return p.rdb.Del(ctx, p.keys.LegacyCounters()).Err()
}

// KEYS[1]: the counters. ARGV: field, value, … (the release before's).
var mergeCountersScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], 'merged:v2', 1) == 0 then return 0 end
for i = 1, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1`)
