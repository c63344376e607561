package producer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// A subscriber is stored in two places (see tasks.Keys): its configuration
// and index entries in the directory, changed together in one transaction
// so Publish never misses it; and its gate record (generation, pause) in
// the subscriber's own slot, which every delivery reads fresh. The record
// is written after the directory on creation and removed after it on
// deletion, so a half-done change makes deliveries fail safe (refused) and
// the next Put repairs it.

// PutSubscriber creates or replaces a subscriber and returns it as stored,
// with defaults filled. When s has no secrets, a replaced subscriber keeps
// its secrets (so changing a URL does not break the receiver's
// verification) and a new one gets a generated secret. s.Paused applies
// to a new subscriber only: an existing one keeps its pause, whoever set
// it, until SetPaused changes it.
func (p *Producer) PutSubscriber(ctx context.Context, s tasks.Subscriber) (tasks.Subscriber, error) {
	s, _, err := p.UpsertSubscriber(ctx, s)
	return s, err
}

// UpsertSubscriber is PutSubscriber that also reports whether the
// subscriber was created (true) or replaced.
func (p *Producer) UpsertSubscriber(ctx context.Context, s tasks.Subscriber) (tasks.Subscriber, bool, error) {
	keep := len(s.Secrets) == 0
	// Validate before touching Redis: a refused call writes nothing and
	// says why even while Redis is down.
	probe, err := s.WithDefaults()
	if err != nil {
		return probe, false, err
	}
	probe.Retiring = pruneRetiring(probe.Retiring, p.nowFunc())
	if err := probe.Validate(); err != nil {
		return probe, false, err
	}
	if err := tasks.ValidateURLAddress(s.URL, p.cfg.AllowedCIDRs); err != nil {
		return probe, false, err
	}
	// The tenant's defaults, then the subscriber's, then the tenant's caps.
	t, err := p.tenantSettings(ctx)
	if err != nil {
		return probe, false, err
	}
	var inFlight *int // what the tenant's other subscribers leave: read once, if at all
	left := func() (int, error) {
		if inFlight == nil {
			n, err := p.inFlightLeft(ctx, t.MaxInFlight, p.sid(s.ID))
			if err != nil {
				return 0, err
			}
			inFlight = &n
		}
		return *inFlight, nil
	}
	if s, err = t.fill(s, left); err != nil {
		return probe, false, err
	}
	if s, err = s.WithDefaults(); err != nil {
		return s, false, err
	}
	s.Retiring = pruneRetiring(s.Retiring, p.nowFunc())
	if err := t.check(p.writeTenant(), s, left); err != nil {
		return s, false, err
	}
	pause := s.Paused
	s.ID = p.sid(s.ID) // stored under its tenant's name (Tenant)
	var old tasks.Subscriber
	var found bool
	limit := t.MaxSubscribers
	version, err := p.updateSubscriber(ctx, s.ID, func(cur tasks.Subscriber, ok bool) (tasks.Subscriber, error) {
		old, found = cur, ok
		if !ok && limit > 0 {
			lo, hi := tasks.ScopedRange(p.tenant)
			n, err := p.rdb.ZLexCount(ctx, p.keys.SubscriberIDs(), lo, hi).Result()
			if err != nil {
				return s, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
			}
			if n >= int64(limit) {
				return s, fmt.Errorf("%w: tenant %s has %d subscribers, its max_subscribers", ErrTenantLimit, p.tenant, n)
			}
		}
		if ok {
			s.Gen = cur.Gen
			if keep {
				s.Secrets, s.Retiring = cur.Secrets, pruneRetiring(cur.Retiring, p.nowFunc())
			}
		} else {
			s.Gen = newGen()
		}
		return s, nil
	})
	if err != nil {
		return p.extSub(s), false, err
	}
	if err := p.writeRecord(ctx, s, version, !found && pause); err != nil {
		return p.extSub(s), false, err
	}
	if found && (old.Limit != s.Limit || old.MaxInFlight != s.MaxInFlight || old.Region != s.Region) {
		if err := p.repace(ctx, old, s); err != nil {
			return p.extSub(s), false, err
		}
	}
	stored, err := p.storedByID(ctx, s.ID) // with its gate record (pause); deleted meanwhile: unknown
	if err != nil {
		return p.extSub(s), false, err
	}
	return p.extSub(stored), !found, nil
}

func newGen() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// updateSubscriber runs a read-modify-write of one subscriber's
// configuration as an optimistic transaction: change gets the current
// configuration (ok false: none) and returns the new one, which is written
// with its index entries; a concurrent change makes it start over.
func (p *Producer) updateSubscriber(ctx context.Context, id string, change func(cur tasks.Subscriber, ok bool) (tasks.Subscriber, error)) (int64, error) {
	var changeErr error
	var version *redis.IntCmd
	for range 20 {
		err := p.rdb.Watch(ctx, func(tx *redis.Tx) error {
			cur, ok, err := p.readConfig(ctx, tx, id)
			if err != nil {
				changeErr = err
				return err
			}
			next, err := change(cur, ok)
			if err == nil && (!ok || regionOf(cur) != regionOf(next)) {
				err = p.checkRegionRoom(ctx, tx, next)
			}
			if err != nil {
				changeErr = err
				return err
			}
			b, _ := json.Marshal(next) // plain data: cannot fail
			_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
				pl.HSet(ctx, p.keys.SubscriberConfigs(), id, b)
				version = pl.Incr(ctx, p.keys.SubscriberVersion(id))
				pl.ZAdd(ctx, p.keys.SubscriberIDs(), redis.Z{Member: id})
				if next.Metrics {
					pl.ZAdd(ctx, p.keys.MetricsIndex(), redis.Z{Member: id})
				} else if ok && cur.Metrics {
					pl.ZRem(ctx, p.keys.MetricsIndex(), id)
				}
				p.moveRegion(ctx, pl, cur, ok, next)
				for _, f := range filterKeys(p.keys, id, next.EventTypes) {
					pl.SAdd(ctx, f, id)
				}
				if ok {
					for _, f := range filterKeys(p.keys, id, cur.EventTypes) {
						if !slices.Contains(filterKeys(p.keys, id, next.EventTypes), f) {
							pl.SRem(ctx, f, id)
						}
					}
				}
				return nil
			})
			return err
		}, p.keys.SubscriberVersion(id))
		switch {
		case err == nil:
			return version.Val(), nil
		case changeErr != nil:
			return 0, changeErr
		case !errors.Is(err, redis.TxFailedErr):
			return 0, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
	}
	return 0, fmt.Errorf("%w: subscriber %s kept changing during the update; try again", ErrRedisUnavailable, id)
}

// filterKeys are the index sets subscriber id (stored) with these
// filters is in: its tenant's.
func filterKeys(k tasks.Keys, id string, types []string) []string {
	tenant := tasks.TenantOf(id)
	if len(types) == 0 {
		return []string{k.AnyIndex(tenant)}
	}
	out := make([]string, 0, len(types))
	for _, t := range types {
		if f := k.IndexKeyOf(tenant, t); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// readConfig reads one stored configuration.
func (p *Producer) readConfig(ctx context.Context, c redis.Cmdable, id string) (tasks.Subscriber, bool, error) {
	var s tasks.Subscriber
	v, err := c.HGet(ctx, p.keys.SubscriberConfigs(), id).Result()
	if errors.Is(err, redis.Nil) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, false, fmt.Errorf("subscriber %s: stored value unreadable: %w", id, err)
	}
	return s, true, nil
}

// writeRecord writes the gate record's generation (repairing a record a
// crash left out) and the configuration's version (a worker whose cached
// copy is older reads it again before its next request: a secret rotated
// out stops signing at once), and, for a new subscriber created paused,
// the pause.
func (p *Producer) writeRecord(ctx context.Context, s tasks.Subscriber, version int64, pause bool) error {
	rec := p.keys.Gate(s.ID)
	_, err := p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.HSet(ctx, rec, "gen", s.Gen, "cv", version)
		if pause {
			pl.HSet(ctx, rec, "paused", tasks.PauseOperator, "paused_at", p.nowFunc().UnixMilli())
		}
		return nil
	})
	if err == nil && pause {
		err = p.listPaused(ctx, s.ID, true)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// listPaused adds subscriber id to the paused index, or removes it: only
// /metrics' count reads it, the gate record holds the pause. Another slot
// than the record's, so written just after it.
func (p *Producer) listPaused(ctx context.Context, id string, paused bool) error {
	if paused {
		return p.rdb.SAdd(ctx, p.keys.PausedIndex(), id).Err()
	}
	return p.rdb.SRem(ctx, p.keys.PausedIndex(), id).Err()
}

// GetSubscriber returns ErrUnknownSubscriber when there is none with id.
func (p *Producer) GetSubscriber(ctx context.Context, id string) (tasks.Subscriber, error) {
	s, err := p.storedSubscriber(ctx, id)
	return p.extSub(s), err
}

// storedByID is the subscriber stored as stored (a dead letter's, a
// task's: any tenant's), or ErrUnknownSubscriber (named by p's id).
func (p *Producer) storedByID(ctx context.Context, stored string) (tasks.Subscriber, error) {
	if err := tasks.ValidateScopedID(stored); err != nil {
		return tasks.Subscriber{}, err
	}
	subs, err := p.subscribers(ctx, []string{stored})
	if err != nil {
		return tasks.Subscriber{}, err
	}
	if len(subs) == 0 {
		return tasks.Subscriber{}, fmt.Errorf("%w: %s", ErrUnknownSubscriber, p.ext(stored))
	}
	return subs[0], nil
}

// storedSubscriber is GetSubscriber's subscriber as stored: its id the
// stored one (of its tenant, Tenant).
func (p *Producer) storedSubscriber(ctx context.Context, id string) (tasks.Subscriber, error) {
	// Any id a subscriber may be stored under, "." and ".." included:
	// reading one created before they were refused (a pause, a replay, a
	// migration) keeps working.
	if err := tasks.ValidateStoredSubscriberID(id); err != nil {
		return tasks.Subscriber{}, err
	}
	return p.storedByID(ctx, p.sid(id))
}

// subscribers reads the subscribers with these ids, with their gate
// records, in two round trips; unknown ids are left out.
func (p *Producer) subscribers(ctx context.Context, ids []string) ([]tasks.Subscriber, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	vals, err := p.rdb.HMGet(ctx, p.keys.SubscriberConfigs(), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	out := make([]tasks.Subscriber, 0, len(ids))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		var s tasks.Subscriber
		if err := json.Unmarshal([]byte(str), &s); err != nil {
			p.cfg.Logger.Error("skipping unreadable subscriber", "subscriber_id", ids[i], "err", err)
			continue
		}
		out = append(out, s)
	}
	recs := make([]*redis.SliceCmd, len(out))
	_, err = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, s := range out {
			recs[i] = pl.HMGet(ctx, p.keys.Gate(s.ID), "paused", "paused_at")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	for i := range out {
		v := recs[i].Val()
		if reason, ok := v[0].(string); ok {
			out[i].Paused, out[i].PauseReason = true, reason
			if ms, err := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64); err == nil {
				out[i].PausedAt = time.UnixMilli(ms).UTC()
			}
		}
	}
	return out, nil
}

// ListSubscribers returns every subscriber, in id order. It reads them all:
// for many, page through them with Subscribers.
func (p *Producer) ListSubscribers(ctx context.Context) ([]tasks.Subscriber, error) {
	var all []tasks.Subscriber
	for after := ""; ; {
		page, next, err := p.Subscribers(ctx, after, 1000)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		after = next
	}
}

// Subscribers returns up to limit subscribers with ids after after, in id
// order, and the id to continue after ("" at the end). Its cost depends on
// limit, not on how many subscribers there are.
func (p *Producer) Subscribers(ctx context.Context, after string, limit int) ([]tasks.Subscriber, string, error) {
	limit = min(max(limit, 1), maxPage)
	ids, err := p.subscriberIDs(ctx, after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	subs, err := p.subscribers(ctx, ids)
	if err != nil {
		return nil, "", err
	}
	for i := range subs {
		subs[i] = p.extSub(subs[i])
	}
	next := ""
	if len(ids) == limit {
		next = p.ext(ids[len(ids)-1])
	}
	return subs, next, nil
}

// subscriberIDs are up to limit stored ids of p's subscribers after after
// (p's id), in id order. Every subscriber id is in one sorted set, a
// tenant's "<tenant>/…" side by side: a tenant's are one range of it; the
// default tenant's are the ids without a slash, each other tenant's range
// skipped whole.
func (p *Producer) subscriberIDs(ctx context.Context, after string, limit int) ([]string, error) {
	lo, hi := "-", "+"
	if t := p.tenant; t != "" && t != tasks.DefaultTenant {
		lo, hi = tasks.ScopedRange(t)
	}
	if after != "" {
		lo = "(" + p.sid(after)
	}
	var ids []string
	for len(ids) < limit {
		want := limit - len(ids)
		page, err := p.rdb.ZRangeByLex(ctx, p.keys.SubscriberIDs(), &redis.ZRangeBy{Min: lo, Max: hi, Count: int64(want)}).Result()
		if err != nil {
			return nil, err
		}
		skipped := false
		for _, id := range page {
			lo = "(" + id
			if !p.owns(id) { // (the default tenant's Producer) another tenant's range: skipped whole
				_, end := tasks.ScopedRange(tasks.TenantOf(id))
				lo, skipped = "["+end[1:], true
				break
			}
			ids = append(ids, id)
		}
		if !skipped && len(page) < want {
			break
		}
	}
	return ids, nil
}

// DeleteSubscriber removes a subscriber and its gate state. Its queued
// events are dropped when they come due (counted, not sent, not
// dead-lettered), also when a subscriber of the same id is created
// meanwhile: that one is a new generation. A deletion cut off halfway (its
// configuration gone, its gate state not) is finished by deleting again,
// which then succeeds; deleting what is wholly gone is ErrUnknownSubscriber.
func (p *Producer) DeleteSubscriber(ctx context.Context, id string) error {
	// Any id a subscriber may be stored under: one created before "." and
	// ".." were refused can still be deleted.
	if err := tasks.ValidateStoredSubscriberID(id); err != nil {
		return err
	}
	shown := id
	id = p.sid(id)
	// Read before the configuration: a gate record whose configuration is
	// gone after it was read is a deletion's leftover (a creation writes
	// the configuration first), and the forget below removes only that
	// generation's, never one created since.
	left, err := p.rdb.HGet(ctx, p.keys.Gate(id), "gen").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	var gen string
	err = p.rdb.Watch(ctx, func(tx *redis.Tx) error {
		cur, ok, err := p.readConfig(ctx, tx, id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %s", ErrUnknownSubscriber, shown)
		}
		gen = cur.Gen
		_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			pl.HDel(ctx, p.keys.SubscriberConfigs(), id)
			pl.Incr(ctx, p.keys.SubscriberVersion(id))
			pl.ZRem(ctx, p.keys.SubscriberIDs(), id)
			pl.ZRem(ctx, p.keys.MetricsIndex(), id)
			pl.SRem(ctx, p.keys.PausedIndex(), id)
			pl.SRem(ctx, p.keys.OpenBreakers(), id)
			pl.HIncrBy(ctx, p.keys.RegionSubscribers(), regionOf(cur), -1)
			for _, f := range filterKeys(p.keys, id, cur.EventTypes) {
				pl.SRem(ctx, f, id)
			}
			return nil
		})
		return err
	}, p.keys.SubscriberVersion(id))
	if errors.Is(err, ErrUnknownSubscriber) && left != "" {
		gen = left // a deletion cut off before its forget: finish it
	} else if errors.Is(err, ErrUnknownSubscriber) || errors.Is(err, ErrRedisUnavailable) {
		return err
	} else if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	// Its gate keys and schedule, only if they are still the deleted
	// generation's: a subscriber created again meanwhile keeps its own.
	k := p.keys.Gates(id)
	dropped, err := forgetScript.Run(ctx, p.rdb, []string{k.Record, k.Cooldown, k.InFlight, k.Rate, k.Lot, k.Out, k.Exp, k.Fresh, k.Log,
		k.Stats, k.DeadBatch, k.DeadSample, k.Retry, k.Runs}, gen).Int64()
	if err == nil && dropped > 0 {
		err = p.rdb.HIncrBy(ctx, p.keys.Counters(), tasks.CounterDroppedDeleted, dropped).Err()
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// KEYS: the subscriber's gate record, then its other keys. ARGV: 1 the
// deleted generation. Deletes them if the record is still that
// generation's, and answers how many parked deliveries went with them
// (dropped unsent, counted); its delivery records expire by themselves.
var forgetScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return 0 end
local n = redis.call('ZCARD', KEYS[5])
redis.call('DEL', unpack(KEYS))
return n`)

// SetPaused pauses (reason "operator") or resumes a subscriber, whoever
// paused it. A paused subscriber gets no new events from Publish and its
// queued events are held; resuming lets a dispatcher hand them out at the
// subscriber's pace (the call only tells it: it answers at once, however
// many are held).
func (p *Producer) SetPaused(ctx context.Context, id string, paused bool) error {
	s, err := p.storedSubscriber(ctx, id)
	if err != nil {
		return err
	}
	id = s.ID
	rec := p.keys.Gate(id)
	if paused {
		err = p.rdb.HSet(ctx, rec, "paused", tasks.PauseOperator, "paused_at", p.nowFunc().UnixMilli()).Err()
	} else {
		err = p.gates.Resume(ctx, p.keys.Gates(id))
	}
	if err == nil {
		err = p.listPaused(ctx, id, paused)
	}
	if err == nil && !paused {
		err = p.gates.Notify(ctx, p.keys.Ready(s.Region), id, time.Time{})
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// repace carries a subscriber's limiter over to its new limit (the burst
// spent stays spent; see limits.Gates.ChangeLimit) and gives its schedule
// a turn under the new limit, slots and region.
func (p *Producer) repace(ctx context.Context, old, s tasks.Subscriber) error {
	k := p.keys.Gates(s.ID)
	err := error(nil)
	if old.Limit != s.Limit {
		err = p.gates.ChangeLimit(ctx, k, old.Limit, s.Limit)
	}
	if err == nil {
		err = p.gates.Notify(ctx, p.keys.Ready(s.Region), s.ID, time.Time{})
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// EndCooldown ends subscriber id's cooldown now (an endpoint's Retry-After
// or a spent quota), an operator's lever for a receiver that asked for
// too long: its parked deliveries are handed out at once, at its pace. It
// reports whether a cooldown was running.
func (p *Producer) EndCooldown(ctx context.Context, id string) (bool, error) {
	s, err := p.storedSubscriber(ctx, id)
	if err != nil {
		return false, err
	}
	id = s.ID
	ended, err := p.gates.EndCooldown(ctx, p.keys.Gates(id))
	if err == nil {
		err = p.gates.Notify(ctx, p.keys.Ready(s.Region), id, time.Time{})
	}
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return ended, nil
}
