package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// ErrTooManySecrets: a rotation would leave more than tasks.MaxSecrets
// secrets signing; wait for retiring ones to expire or rotate with no grace.
var ErrTooManySecrets = errors.New("too many secrets")

// MaxGrace caps RotateSecret's grace period.
const MaxGrace = 30 * 24 * time.Hour

// RotateSecret gives subscriber id a new secret and returns the subscriber
// as stored and the new secret. The secrets it had keep signing (beside the
// new one) until grace has passed, so the receiver can switch over without
// refusing a request. Grace 0 stops every old secret at once, retiring ones
// included: the rotation for a leaked secret.
func (p *Producer) RotateSecret(ctx context.Context, id string, grace time.Duration) (tasks.Subscriber, string, error) {
	if err := tasks.ValidateSubscriberID(id); err != nil {
		return tasks.Subscriber{}, "", err
	}
	if grace < 0 || grace > MaxGrace {
		return tasks.Subscriber{}, "", &tasks.FieldError{Field: "grace", Msg: "want 0 up to 720h"}
	}
	secret, err := tasks.NewSecret()
	if err != nil {
		return tasks.Subscriber{}, "", err
	}
	var s tasks.Subscriber
	err = p.updateSubscribers(ctx, func(tx *redis.Tx) (func(redis.Pipeliner), error) {
		var found bool
		var err error
		if s, found, err = p.readSubscriber(ctx, tx, id); err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: %s", ErrUnknownSubscriber, id)
		}
		now := p.nowFunc()
		var retiring []tasks.RetiringSecret // grace 0: every old secret stops now
		if grace > 0 {
			retiring = pruneRetiring(s.Retiring, now)
			for _, old := range s.Secrets {
				retiring = append(retiring, tasks.RetiringSecret{Secret: old, Until: now.Add(grace)})
			}
		}
		if 1+len(retiring) > tasks.MaxSecrets {
			return nil, fmt.Errorf("%w: %d would sign (limit %d); wait for a retiring secret to expire or rotate with grace 0",
				ErrTooManySecrets, 1+len(retiring), tasks.MaxSecrets)
		}
		// Read before the write: an error after it would lose the new
		// secret, which is shown only once.
		if s.Paused, err = tx.SIsMember(ctx, p.keys.Paused(), id).Result(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		s.Secrets, s.Retiring = []string{secret}, retiring
		return p.writeSubscriber(ctx, s, false), nil
	})
	if err != nil {
		return tasks.Subscriber{}, "", err
	}
	return s, secret, nil
}

// pruneRetiring drops the retiring secrets whose grace has ended at now.
func pruneRetiring(rs []tasks.RetiringSecret, now time.Time) []tasks.RetiringSecret {
	var out []tasks.RetiringSecret
	for _, r := range rs {
		if now.Before(r.Until) {
			out = append(out, r)
		}
	}
	return out
}
