package producer

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// A tenant's settings as they shape its subscribers (TenantSettings):
// defaults for what a subscriber is saved without, and caps on what it is
// saved with. Each refusal names the subscriber's field and writes nothing.

// tenantSettings are the settings of p's tenant (none for the default
// tenant and the operator's Producer).
func (p *Producer) tenantSettings(ctx context.Context) (TenantSettings, error) {
	if p.tenant == "" || p.tenant == tasks.DefaultTenant {
		return TenantSettings{}, nil
	}
	t, _, err := p.readTenant(ctx, p.rdb, p.tenant)
	return t.TenantSettings, err
}

// fill gives s, before its own defaults, the tenant's: its retry policy,
// and a limit and a max in flight within its caps (inFlightLeft: what the
// other subscribers leave of MaxInFlight, read only when it is set).
func (t TenantSettings) fill(s tasks.Subscriber, inFlightLeft func() (int, error)) (tasks.Subscriber, error) {
	if s.MaxAttempts == 0 {
		s.MaxAttempts = t.MaxAttempts
	}
	if s.RetryHorizon == 0 {
		s.RetryHorizon = t.RetryHorizon
	}
	if s.Limit.IsZero() && t.MaxRate > 0 && limits.DefaultLimit.PerSecond() > float64(t.MaxRate) {
		s.Limit = limits.PerSecond(t.MaxRate)
	}
	if s.MaxInFlight == 0 && t.MaxInFlight > 0 {
		left, err := inFlightLeft()
		if err != nil {
			return s, err
		}
		s.MaxInFlight = max(1, min(tasks.DefaultMaxInFlight, left))
	}
	return s, nil
}

// check refuses s past the tenant's caps.
func (t TenantSettings) check(tenant string, s tasks.Subscriber, inFlightLeft func() (int, error)) error {
	if t.MaxRate > 0 && s.Limit.PerSecond() > float64(t.MaxRate) {
		return &tasks.FieldError{Field: "limit", Msg: fmt.Sprintf("tenant %s allows an endpoint at most %d requests a second; this limit is %.4g",
			tenant, t.MaxRate, s.Limit.PerSecond())}
	}
	if t.MaxInFlight > 0 {
		left, err := inFlightLeft()
		if err != nil {
			return err
		}
		if s.MaxInFlight > left {
			return &tasks.FieldError{Field: "max_in_flight", Msg: fmt.Sprintf("tenant %s allows %d in flight across its endpoints; the others leave %d",
				tenant, t.MaxInFlight, max(left, 0))}
		}
	}
	return nil
}

// inFlightLeft is what p's tenant's subscribers but stored id leave of
// limit: one read of the tenant's subscribers' configurations.
func (p *Producer) inFlightLeft(ctx context.Context, limit int, id string) (int, error) {
	lo, hi := tasks.ScopedRange(p.tenant)
	ids, err := p.rdb.ZRangeByLex(ctx, p.keys.SubscriberIDs(), &redis.ZRangeBy{Min: lo, Max: hi}).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	used := 0
	for start := 0; start < len(ids); start += 1000 {
		chunk := ids[start:min(start+1000, len(ids))]
		vals, err := p.rdb.HMGet(ctx, p.keys.SubscriberConfigs(), chunk...).Result()
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		for i, v := range vals {
			var c struct {
				MaxInFlight int `json:"max_in_flight"`
			}
			if str, ok := v.(string); ok && chunk[i] != id && json.Unmarshal([]byte(str), &c) == nil {
				used += c.MaxInFlight
			}
		}
	}
	return limit - used, nil
}
