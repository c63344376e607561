package producer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// Regions are bounded: each one a subscriber names costs every worker that
// serves all regions its asynq Servers and a dispatcher, so a namespace's
// subscribers may name at most Config.MaxRegions, the default region
// included. tasks.Keys.RegionSubscribers counts the subscribers of each;
// the transaction that writes or deletes a configuration moves the counts
// (updateSubscriber, DeleteSubscriber), and workers prune a region whose
// count is 0 once its queues are empty (PruneRegion).

// regionOf is the region subscriber s is counted in.
func regionOf(s tasks.Subscriber) string {
	if s.Region == "" {
		return tasks.DefaultRegion
	}
	return s.Region
}

// checkRegionRoom refuses next's region, in an update's transaction tx,
// when the namespace does not have it yet and has its maximum. A region it
// has is always room (no WATCH: subscribers created side by side in one
// region do not make each other start over); a new one is checked under a
// WATCH of the counts, so that two new regions written at once cannot
// both take the last room.
func (p *Producer) checkRegionRoom(ctx context.Context, tx *redis.Tx, next tasks.Subscriber) error {
	r := regionOf(next)
	if r == tasks.DefaultRegion {
		return nil
	}
	if has, err := tx.HExists(ctx, p.keys.RegionSubscribers(), r).Result(); err != nil || has {
		return err
	}
	if err := tx.Watch(ctx, p.keys.RegionSubscribers()).Err(); err != nil {
		return err
	}
	counts, err := tx.HGetAll(ctx, p.keys.RegionSubscribers()).Result()
	if err != nil {
		return err
	}
	if _, ok := counts[r]; ok {
		return nil
	}
	n := 1 // the default region
	for f := range counts {
		if f != tasks.DefaultRegion {
			n++
		}
	}
	if n < p.cfg.MaxRegions {
		return nil
	}
	names := slices.Sorted(maps.Keys(counts))
	return &tasks.FieldError{Field: "region", Msg: fmt.Sprintf("this namespace already has its %d regions (%s; HOOKLANE_MAX_REGIONS): "+
		"name one of them, or delete every subscriber of one first (a region is let go within a minute once its queues are empty)",
		p.cfg.MaxRegions, strings.Join(names, ", "))}
}

// moveRegion queues, in an update's transaction, the change of the region
// counts from cur (ok: it existed) to next.
func (p *Producer) moveRegion(ctx context.Context, pl redis.Pipeliner, cur tasks.Subscriber, ok bool, next tasks.Subscriber) {
	if ok && regionOf(cur) == regionOf(next) {
		return
	}
	pl.HIncrBy(ctx, p.keys.RegionSubscribers(), regionOf(next), 1)
	if ok {
		pl.HIncrBy(ctx, p.keys.RegionSubscribers(), regionOf(cur), -1)
	}
}

// Regions answers the regions the namespace's subscribers name, with how
// many name each (0: none left; a worker lets it go once its queues are
// empty).
func (p *Producer) Regions(ctx context.Context) (map[string]int, error) {
	h, err := p.rdb.HGetAll(ctx, p.keys.RegionSubscribers()).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	out := make(map[string]int, len(h))
	for r, v := range h {
		out[r], _ = strconv.Atoi(v)
	}
	return out, nil
}

// PruneRegion deletes region from the region counts if no subscriber
// names it, and reports whether it did. The caller (a worker) has seen the
// region's queues and ready index empty: with no subscriber, nothing adds
// to them, and a subscriber that names the region again counts it anew
// (the count is read in the same script that deletes it).
func (p *Producer) PruneRegion(ctx context.Context, region string) (bool, error) {
	n, err := pruneRegionScript.Run(ctx, p.rdb, []string{p.keys.RegionSubscribers()}, region).Int()
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return n == 1, nil
}

var pruneRegionScript = redis.NewScript(`
local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if n > 0 then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1`)

// rebuildRegions counts the regions of every stored configuration again,
// in one script on the directory's slot (so no update runs meanwhile),
// and keeps the fields of regions counted 0 that are still there (a worker
// prunes them once their queues are empty). Migrate runs it: the release
// before kept only a set of every region ever named.
func (p *Producer) rebuildRegions(ctx context.Context) error {
	return rebuildRegionsScript.Run(ctx, p.rdb, []string{p.keys.SubscriberConfigs(), p.keys.RegionSubscribers(), p.keys.LegacyRegions()},
		tasks.DefaultRegion).Err()
}

// KEYS: 1 the configurations, 2 the region counts, 3 the release before's
// set of regions. ARGV: 1 the default region's name. A region of the old
// set is kept with count 0, so that workers look at its queues once
// before letting it go.
var rebuildRegionsScript = redis.NewScript(`
local counts = {}
for _, r in ipairs(redis.call('SMEMBERS', KEYS[3])) do counts[r] = 0 end
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do counts[f] = 0 end
local all = redis.call('HGETALL', KEYS[1])
for i = 2, #all, 2 do
  local ok, c = pcall(cjson.decode, all[i])
  local r = ARGV[1]
  if ok and type(c) == 'table' and type(c.region) == 'string' and c.region ~= '' then r = c.region end
  counts[r] = (counts[r] or 0) + 1
end
redis.call('DEL', KEYS[2])
for r, n in pairs(counts) do redis.call('HSET', KEYS[2], r, n) end
return 1`)
