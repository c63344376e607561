package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// MigrationReport says what Migrate carried over from the layout of the
// release before.
type MigrationReport struct {
	Subscribers int `json:"subscribers"` // created in the directory (existing ones are left)
	DeadLetters int `json:"dead_letters"`
	Cooldowns   int `json:"cooldowns"` // Retry-After deadlines still running
}

// Migrate carries a namespace written by the release before (layout 1: one
// hash of subscribers, a paused set, slot-less gate keys, one asynq queue)
// into this layout: subscribers with their pause, the gate state that
// holds a promise (cooldowns, the rate limiter, the pacing cursor), the
// counters and the dead-letter ledger. The old keys are left as they are,
// so that a rollback finds them.
//
// Once done, it marks the namespace's layout and does nothing more, unless
// again is set (`hooklane migrate`): then it carries over what the release
// before wrote since, e.g. subscribers its API created during a rolling
// upgrade. It is safe to run again, and by several processes at once: what
// exists in the new layout is not overwritten (a subscriber changed since
// the upgrade keeps its change), cooldowns keep the later deadline,
// counters are copied only where there are none. Workers run it at start;
// tasks still in the old queue are delivered by every worker of this
// release.
func (p *Producer) Migrate(ctx context.Context, again bool) (MigrationReport, error) {
	var rep MigrationReport
	v1 := p.keys.V1()
	// One key per EXISTS: on a Cluster the two are in different slots.
	var subs, dead *redis.IntCmd
	if _, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		subs, dead = pl.Exists(ctx, v1.Subscribers()), pl.Exists(ctx, v1.DeadIndex())
		return nil
	}); err != nil {
		return rep, err
	}
	if subs.Val()+dead.Val() == 0 {
		return rep, nil // nothing of the release before
	}
	if done, err := p.rdb.HGet(ctx, p.keys.Layout(), "migrated").Result(); err == nil && done == "1" && !again {
		return rep, nil
	} else if err != nil && !errors.Is(err, redis.Nil) {
		return rep, err
	}
	paused, err := p.rdb.SMembers(ctx, v1.Paused()).Result()
	if err != nil {
		return rep, err
	}
	isPaused := map[string]bool{}
	for _, id := range paused {
		isPaused[id] = true
	}
	var cursor uint64
	for {
		kv, next, err := p.rdb.HScan(ctx, v1.Subscribers(), cursor, "*", 200).Result()
		if err != nil {
			return rep, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			created, cooled, err := p.migrateSubscriber(ctx, kv[i], kv[i+1], isPaused[kv[i]])
			if err != nil {
				return rep, fmt.Errorf("subscriber %s: %w", kv[i], err)
			}
			if created {
				rep.Subscribers++
			}
			if cooled {
				rep.Cooldowns++
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if rep.DeadLetters, err = p.migrateDeadLetters(ctx); err != nil {
		return rep, err
	}
	return rep, p.rdb.HSet(ctx, p.keys.Layout(), "migrated", "1").Err()
}

// MigrateSubscriber carries one subscriber of the release before over, if
// its layout has it and the directory does not: a worker calls it for a
// task of the old queue whose subscriber the old API created after the
// migration (during a rolling upgrade). It reports whether the directory
// has the subscriber now.
func (p *Producer) MigrateSubscriber(ctx context.Context, id string) (bool, error) {
	v1 := p.keys.V1()
	raw, err := p.rdb.HGet(ctx, v1.Subscribers(), id).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	paused, err := p.rdb.SIsMember(ctx, v1.Paused(), id).Result()
	if err != nil {
		return false, err
	}
	created, _, err := p.migrateSubscriber(ctx, id, raw, paused)
	if err != nil {
		return false, err
	}
	if created {
		p.cfg.Logger.Info("migrated a subscriber of the release before", "subscriber_id", id)
	}
	return true, nil
}

// migrateSubscriber creates one old subscriber in the directory, unless it
// is there already, and carries its gate state over.
func (p *Producer) migrateSubscriber(ctx context.Context, id, raw string, paused bool) (created, cooled bool, err error) {
	var s tasks.Subscriber
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		p.cfg.Logger.Error("migration: skipping an unreadable subscriber", "subscriber_id", id, "err", err)
		return false, false, nil
	}
	s.ID = id
	err = p.updateSubscriber(ctx, id, func(cur tasks.Subscriber, found bool) (tasks.Subscriber, error) {
		if found {
			return cur, errExists
		}
		created = true
		s.Gen = newGen()
		return s, nil
	})
	switch {
	case errors.Is(err, errExists):
		created = false
	case err != nil:
		return false, false, err
	}
	if created {
		cur, err := p.GetSubscriber(ctx, id) // as stored, with its generation
		if err != nil {
			return false, false, err
		}
		if err := p.writeRecord(ctx, cur, paused); err != nil {
			return false, false, err
		}
	}
	return created, p.migrateGateState(ctx, id), nil
}

var errExists = errors.New("exists")

// migrateGateState copies what of a subscriber's old gate state keeps a
// promise: a running cooldown (a Retry-After deadline), the rate limiter's
// and the pacing cursor's position, and its counters. It reports whether a
// cooldown was running. Best effort: a failure is logged; the endpoint's
// next 429 sets a cooldown again.
func (p *Producer) migrateGateState(ctx context.Context, id string) bool {
	v1, k := p.keys.V1(), p.keys.Gates(id)
	var cool, rate, pace *redis.StringCmd
	var stats *redis.MapStringStringCmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		cool, rate, pace = pl.Get(ctx, v1.Cooldown(id)), pl.Get(ctx, v1.Rate(id)), pl.Get(ctx, v1.Pacing(id))
		stats = pl.HGetAll(ctx, v1.Stats(id))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		p.cfg.Logger.Error("migration: reading old gate state", "subscriber_id", id, "err", err)
		return false
	}
	until := limits.ParseCooldown(cool.Val())
	cooled := until.After(p.nowFunc())
	if cooled {
		if _, _, err := p.gates.Cooldown(ctx, k, limits.RetryAfter{At: until}, 24*time.Hour); err != nil {
			p.cfg.Logger.Error("migration: copying a cooldown", "subscriber_id", id, "err", err)
		}
	}
	_, err = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		if rate.Val() != "" {
			pl.SetNX(ctx, k.Rate, rate.Val(), 0)
			pl.Expire(ctx, k.Rate, 24*time.Hour)
		}
		if pace.Val() != "" {
			pl.SetNX(ctx, k.Pacing, pace.Val(), 24*time.Hour)
		}
		return nil
	})
	if err != nil {
		p.cfg.Logger.Error("migration: copying the limiter's position", "subscriber_id", id, "err", err)
	}
	if len(stats.Val()) > 0 {
		if n, err := p.rdb.Exists(ctx, p.keys.Stats(id)).Result(); err == nil && n == 0 {
			fields := make([]any, 0, 2*len(stats.Val()))
			for f, v := range stats.Val() {
				fields = append(fields, f, v)
			}
			p.rdb.HSet(ctx, p.keys.Stats(id), fields...)
		}
	}
	return cooled
}

// migrateDeadLetters copies the old ledger's entries, with their ttl and
// attempts, that are not in the new one.
func (p *Producer) migrateDeadLetters(ctx context.Context) (int, error) {
	v1 := p.keys.V1()
	moved := 0
	for offset := int64(0); ; offset += 500 {
		zs, err := p.rdb.ZRangeWithScores(ctx, v1.DeadIndex(), offset, offset+499).Result()
		if err != nil || len(zs) == 0 {
			return moved, err
		}
		for _, z := range zs {
			id := z.Member.(string)
			ok, err := p.migrateDeadLetter(ctx, id, z.Score)
			if err != nil {
				return moved, fmt.Errorf("dead letter %s: %w", id, err)
			}
			if ok {
				moved++
			}
		}
	}
}

func (p *Producer) migrateDeadLetter(ctx context.Context, id string, score float64) (bool, error) {
	v1, lk := p.keys.V1(), p.keys.Ledger(id)
	if n, err := p.rdb.Exists(ctx, lk.Entry).Result(); err != nil || n > 0 {
		return false, err
	}
	var entry *redis.StringCmd
	var ttl *redis.DurationCmd
	var attempts *redis.StringSliceCmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		entry, ttl = pl.Get(ctx, v1.DeadLetter(id)), pl.PTTL(ctx, v1.DeadLetter(id))
		attempts = pl.LRange(ctx, v1.Attempts(id), 0, -1)
		return nil
	})
	if errors.Is(err, redis.Nil) || entry.Err() != nil {
		return false, nil // expired meanwhile
	}
	if err != nil {
		return false, err
	}
	var e tasks.DeadLetter
	if err := json.Unmarshal([]byte(entry.Val()), &e); err != nil {
		return false, nil
	}
	e.Queue = p.keys.LegacyQueue() // its archived task is in the old queue
	b, _ := json.Marshal(e)
	keep := max(ttl.Val(), 0) // -1 (none) and -2 read as keep
	_, err = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.ZAdd(ctx, p.keys.AllDeadIndex(), redis.Z{Score: score, Member: id})
		return nil
	})
	if err != nil {
		return false, err
	}
	_, err = p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Set(ctx, lk.Entry, b, keep)
		pl.Del(ctx, lk.Attempts)
		if len(attempts.Val()) > 0 {
			pl.RPush(ctx, lk.Attempts, toAny(attempts.Val())...)
			if keep > 0 {
				pl.PExpire(ctx, lk.Attempts, keep)
			}
		}
		pl.ZAdd(ctx, lk.Index, redis.Z{Score: score, Member: id})
		return nil
	})
	return err == nil, err
}
