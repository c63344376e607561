package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// ErrTooManySecrets: a rotation would leave more than tasks.MaxSecrets
// secrets signing; wait for retiring ones to expire or rotate with no grace.
var ErrTooManySecrets = errors.New("too many secrets")

// MinGrace and MaxGrace bound RotateSecret's grace period, but for 0 (the
// old secrets stop now). A receiver is given the time to switch to the new
// secret, which takes it minutes at least: a grace of seconds or less is a
// mistaken unit, not a plan, and would stop the old secrets as 0 does while
// keeping them in the subscriber.
const (
	MinGrace = time.Minute
	MaxGrace = 30 * 24 * time.Hour
)

// graceWanted is what RotateSecret's grace wants (the API and the console
// answer this error as it is).
const graceWanted = "want 0s (the old secrets stop now) or 1m (a minute) up to 720h (30 days)"

// RotateSecret gives subscriber id a new secret and returns the subscriber
// as stored and the new secret. The secrets it had keep signing (beside the
// new one) until grace has passed, so the receiver can switch over without
// refusing a request: MinGrace up to MaxGrace. Grace 0 stops every old
// secret at once, retiring ones included: the rotation for a leaked secret.
func (p *Producer) RotateSecret(ctx context.Context, id string, grace time.Duration) (tasks.Subscriber, string, error) {
	if err := tasks.ValidateSubscriberID(id); err != nil {
		return tasks.Subscriber{}, "", err
	}
	if grace < 0 || grace > 0 && grace < MinGrace || grace > MaxGrace {
		return tasks.Subscriber{}, "", &tasks.FieldError{Field: "grace", Msg: fmt.Sprintf("%s, got %s", graceWanted, tasks.DurationWords(grace))}
	}
	secret, err := tasks.NewSecret()
	if err != nil {
		return tasks.Subscriber{}, "", err
	}
	var gen string
	version, err := p.updateSubscriber(ctx, p.sid(id), func(s tasks.Subscriber, found bool) (tasks.Subscriber, error) {
		if !found {
			return s, fmt.Errorf("%w: %s", ErrUnknownSubscriber, id)
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
			return s, fmt.Errorf("%w: %d would sign (limit %d); wait for a retiring secret to expire or rotate with grace 0",
				ErrTooManySecrets, 1+len(retiring), tasks.MaxSecrets)
		}
		s.Secrets, s.Retiring = []string{secret}, retiring
		gen = s.Gen
		return s, nil
	})
	if err != nil {
		return tasks.Subscriber{}, "", err
	}
	// The version in the gate record makes every worker read the new
	// secrets before its next request to the subscriber.
	if err := p.rdb.HSet(ctx, p.keys.Gate(p.sid(id)), "gen", gen, "cv", version).Err(); err != nil {
		return tasks.Subscriber{ID: id, Secrets: []string{secret}}, secret, fmt.Errorf("%w: the new secret is stored, "+
			"but workers may sign with the old ones for up to a second: %v", ErrRedisUnavailable, err)
	}
	// Read back with the gate record (pause); the secret is shown only once,
	// so a failure here still returns it.
	s, err := p.GetSubscriber(ctx, id)
	if err != nil {
		return tasks.Subscriber{ID: id, Secrets: []string{secret}}, secret, nil
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
