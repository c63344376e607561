package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// TenantInfo is a tenant as the operator registered it.
type TenantInfo struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	TenantSettings
	// Deleting: a DeleteTenant is under way (or was cut off: deleting
	// again finishes it); the tenant is unknown to its routes meanwhile.
	Deleting bool `json:"deleting,omitempty"`
}

// TenantSettings are a tenant's limits, the operator's to set (zero: no
// limit of the tenant's own).
type TenantSettings struct {
	// IngestRate and IngestBurst are the events a second its publishes
	// may carry, whatever token makes them, beside each token's own
	// limit (a publish past it is answered 429 with Retry-After); a burst
	// left 0 is the rate.
	IngestRate  int `json:"ingest_rate,omitempty"`
	IngestBurst int `json:"ingest_burst,omitempty"`
	// MaxSubscribers caps its subscribers: a creation past it is refused
	// (ErrTenantLimit). Checked as a subscriber is created: two created
	// at the same moment may pass it by one.
	MaxSubscribers int `json:"max_subscribers,omitempty"`
	// MaxRate caps an endpoint's rate limit, in requests a second; an
	// endpoint saved without a limit gets the lesser of the default limit
	// and this.
	MaxRate int `json:"max_rate,omitempty"`
	// MaxInFlight caps the deliveries in flight across all its
	// subscribers: the sum of their max_in_flight may not pass it (a
	// budget the endpoints split, so no moment can pass it either). An
	// endpoint saved without one gets the lesser of the default and what
	// is left. Checked as a subscriber is saved, like MaxSubscribers.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// MaxAttempts and RetryHorizon are its default retry policy: what a
	// subscriber saved without its own gets (tasks.Subscriber's fields of
	// the same names; a subscriber keeps what it was saved with).
	MaxAttempts  int            `json:"max_attempts,omitempty"`
	RetryHorizon tasks.Duration `json:"retry_horizon,omitzero"`
}

// ErrTenantLimit: a call that a tenant's settings refuse (its
// subscribers at MaxSubscribers). Nothing was written.
var ErrTenantLimit = errors.New("tenant limit")

func (s TenantSettings) validate() error {
	switch {
	case s.IngestRate < 0 || s.IngestRate > 1_000_000:
		return &tasks.FieldError{Field: "ingest_rate", Msg: "want 0 (no limit of its own) to 1000000 events a second"}
	case s.IngestBurst < 0 || s.IngestBurst > 1_000_000 || s.IngestBurst > 0 && s.IngestRate == 0:
		return &tasks.FieldError{Field: "ingest_burst", Msg: "want 0 (the rate) to 1000000, with an ingest_rate"}
	case s.MaxSubscribers < 0 || s.MaxSubscribers > 10_000_000:
		return &tasks.FieldError{Field: "max_subscribers", Msg: "want 0 (no limit) to 10000000"}
	case s.MaxRate < 0 || s.MaxRate > 1_000_000:
		return &tasks.FieldError{Field: "max_rate", Msg: "want 0 (no cap) to 1000000 requests a second"}
	case s.MaxInFlight < 0 || s.MaxInFlight > 10_000_000:
		return &tasks.FieldError{Field: "max_in_flight", Msg: "want 0 (no cap) to 10000000"}
	case s.MaxAttempts < 0 || s.MaxAttempts > 100:
		return &tasks.FieldError{Field: "max_attempts", Msg: "want 0 (the producer's default) or 1-100"}
	case s.RetryHorizon < 0 || s.RetryHorizon > 0 && time.Duration(s.RetryHorizon) < time.Second || time.Duration(s.RetryHorizon) > 30*24*time.Hour:
		return &tasks.FieldError{Field: "retry_horizon", Msg: "want 0s (the producer's default) or 1s up to 720h"}
	}
	return nil
}

// PutTenant registers tenant name with settings (created true), or sets
// the settings of one registered. The default tenant always is, and has
// no settings of its own.
func (p *Producer) PutTenant(ctx context.Context, name string, settings TenantSettings) (TenantInfo, bool, error) {
	if err := tasks.ValidateTenant(name); err != nil {
		return TenantInfo{}, false, err
	}
	if err := settings.validate(); err != nil {
		return TenantInfo{}, false, err
	}
	if name == tasks.DefaultTenant {
		if settings != (TenantSettings{}) {
			return TenantInfo{}, false, &tasks.FieldError{Field: "tenant", Msg: "the default tenant has no settings of its own"}
		}
		return TenantInfo{Name: name}, false, nil
	}
	t := TenantInfo{Name: name, CreatedAt: p.nowFunc().UTC().Truncate(time.Millisecond), TenantSettings: settings}
	var created bool
	txf := func(tx *redis.Tx) error {
		cur, ok, err := p.readTenant(ctx, tx, name)
		if err != nil {
			return err
		}
		if ok {
			if cur.Deleting {
				return fmt.Errorf("%w: tenant %s; delete it again to finish, then create it", ErrTenantDeleting, name)
			}
			t.CreatedAt = cur.CreatedAt
		}
		b, _ := json.Marshal(t) // plain data: cannot fail
		_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			pl.HSet(ctx, p.keys.Tenants(), name, b)
			pl.ZAdd(ctx, p.keys.TenantNames(), redis.Z{Member: name})
			return nil
		})
		created = err == nil && !ok
		return err
	}
	var err error
	for range 20 { // another tenant's change meanwhile: again
		if err = p.rdb.Watch(ctx, txf, p.keys.Tenants()); !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil && !errors.Is(err, ErrTenantDeleting) && !errors.Is(err, ErrRedisUnavailable) {
		err = fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return t, created, err
}

// GetTenant returns tenant name, or ErrUnknownTenant.
func (p *Producer) GetTenant(ctx context.Context, name string) (TenantInfo, error) {
	if err := tasks.ValidateTenant(name); err != nil {
		return TenantInfo{}, err
	}
	if name == tasks.DefaultTenant {
		return TenantInfo{Name: name}, nil
	}
	t, ok, err := p.readTenant(ctx, p.rdb, name)
	if err == nil && !ok {
		err = fmt.Errorf("%w: %s", ErrUnknownTenant, name)
	}
	return t, err
}

func (p *Producer) readTenant(ctx context.Context, c redis.Cmdable, name string) (TenantInfo, bool, error) {
	v, err := c.HGet(ctx, p.keys.Tenants(), name).Result()
	if errors.Is(err, redis.Nil) {
		return TenantInfo{}, false, nil
	}
	if err != nil {
		return TenantInfo{}, false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	var t TenantInfo
	if err := json.Unmarshal([]byte(v), &t); err != nil {
		return TenantInfo{}, false, fmt.Errorf("tenant %s: stored value unreadable: %w", name, err)
	}
	return t, true, nil
}

// Tenants returns up to limit registered tenants with names after after,
// in name order (the default tenant, which always is, is not listed), and
// the name to continue after ("" at the end).
func (p *Producer) Tenants(ctx context.Context, after string, limit int) ([]TenantInfo, string, error) {
	limit = min(max(limit, 1), maxPage)
	lo := "-"
	if after != "" {
		lo = "(" + after
	}
	names, err := p.rdb.ZRangeByLex(ctx, p.keys.TenantNames(), &redis.ZRangeBy{Min: lo, Max: "+", Count: int64(limit)}).Result()
	if err != nil || len(names) == 0 {
		if err != nil {
			err = fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		return []TenantInfo{}, "", err
	}
	vals, err := p.rdb.HMGet(ctx, p.keys.Tenants(), names...).Result()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	out := make([]TenantInfo, 0, len(names))
	for i, v := range vals {
		var t TenantInfo
		if s, ok := v.(string); ok && json.Unmarshal([]byte(s), &t) == nil {
			out = append(out, t)
		} else {
			out = append(out, TenantInfo{Name: names[i], Deleting: true}) // its deletion's last step is under way
		}
	}
	next := ""
	if len(names) == limit {
		next = names[len(names)-1]
	}
	return out, next, nil
}

// DeleteTenant deletes tenant name with everything it owns: its
// subscribers (their queued deliveries are dropped unsent, as
// DeleteSubscriber's), the events they were published and their dead
// letters. The tenant is marked deleting first (its routes answer it
// unknown from then on); a deletion cut off halfway is finished by
// deleting again. Its cost grows with what the tenant owns.
func (p *Producer) DeleteTenant(ctx context.Context, name string) error {
	if err := tasks.ValidateTenant(name); err != nil {
		return err
	}
	if name == tasks.DefaultTenant {
		return &tasks.FieldError{Field: "tenant", Msg: "the default tenant cannot be deleted"}
	}
	t, ok, err := p.readTenant(ctx, p.rdb, name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTenant, name)
	}
	if !t.Deleting {
		t.Deleting = true
		b, _ := json.Marshal(t)
		if err := p.rdb.HSet(ctx, p.keys.Tenants(), name, b).Err(); err != nil {
			return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
	}
	tp, err := p.Tenant(name)
	if err != nil {
		return err
	}
	if err := p.deleteTokens(ctx, name); err != nil {
		return err
	}
	if err := tp.deleteAll(ctx); err != nil {
		return err
	}
	// its metrics' counters (another slot: not in the transaction below);
	// a worker's flush of a run that ended meanwhile may write it again
	if err := p.rdb.Del(ctx, p.keys.TenantTotals(name)).Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	_, err = p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.HDel(ctx, p.keys.Tenants(), name)
		pl.ZRem(ctx, p.keys.TenantNames(), name)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// deleteAll deletes everything of p's tenant: each subscriber's events
// (read from its delivery log), dead letters and itself, then the dead
// letters left of subscribers deleted before.
func (p *Producer) deleteAll(ctx context.Context) error {
	for {
		subs, _, err := p.Subscribers(ctx, "", 100)
		if err != nil {
			return err
		}
		if len(subs) == 0 {
			break
		}
		for _, s := range subs {
			if err := p.deleteEventsOf(ctx, p.sid(s.ID)); err != nil {
				return err
			}
			if err := p.deleteDeadLetters(ctx, DeadLetterQuery{Subscriber: s.ID}); err != nil {
				return err
			}
			if err := p.DeleteSubscriber(ctx, s.ID); err != nil && !errors.Is(err, ErrUnknownSubscriber) {
				return err
			}
		}
	}
	return p.deleteDeadLetters(ctx, DeadLetterQuery{})
}

// deleteEventsOf deletes the stored events subscriber stored was
// published (those its delivery log lists).
func (p *Producer) deleteEventsOf(ctx context.Context, stored string) error {
	log := p.keys.DeliveryLog(stored)
	for lo := "-"; ; {
		entries, err := p.rdb.XRangeN(ctx, log, lo, "+", 500).Result()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		if len(entries) == 0 {
			return nil
		}
		_, err = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, e := range entries {
				if id, ok := e.Values["e"].(string); ok {
					ek, lk := p.eventKeys(id)
					pl.Del(ctx, ek)
					pl.Del(ctx, lk)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		lo = "(" + entries[len(entries)-1].ID
	}
}

// deleteDeadLetters deletes p's dead letters that match q, replayed ones
// included.
func (p *Producer) deleteDeadLetters(ctx context.Context, q DeadLetterQuery) error {
	q.IncludeReplayed, q.Limit = true, 1000
	for {
		page, next, err := p.DeadLetters(ctx, q)
		if err != nil {
			return err
		}
		for _, e := range page {
			if err := p.DeleteDeadLetter(ctx, e.TaskID); err != nil && !errors.Is(err, ErrUnknownDeadLetter) {
				return err
			}
		}
		if next == "" {
			return nil
		}
		q.Cursor = next
	}
}
