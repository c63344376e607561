package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Status is the answer of GET /v1/subscribers/{id}/status.
type Status struct {
	SubscriberID string     `json:"subscriber_id"`
	Paused       bool       `json:"paused"`
	PauseReason  string     `json:"pause_reason,omitempty"`
	RateLimit    RateLimit  `json:"rate_limit"`
	MaxInFlight  int        `json:"max_in_flight"`
	CoolingUntil *time.Time `json:"cooling_until"` // null when not cooling down
	InFlight     int64      `json:"in_flight"`
	Counts       Counts     `json:"counts"`
	Breaker      Breaker    `json:"breaker"`
	// EffectiveRate is the pace hooklane sends at: the configured limit, or
	// less, learnt from the receiver (429s, its RateLimit-Policy) or carried
	// by its in-flight slots at the endpoint's latency.
	EffectiveRate EffectiveRate `json:"effective_rate"`
	// CooldownEndedByOperatorAt is when an operator last ended a running
	// cooldown (POST …/cooldown/end); null when none ever did. The
	// deliveries it let go early say so in their attempt's note.
	CooldownEndedByOperatorAt *time.Time `json:"cooldown_ended_by_operator_at"`
}

// EffectiveRate is Status.EffectiveRate.
type EffectiveRate struct {
	Rate   float64 `json:"rate"`   // requests per period (rate_limit.period)
	Period string  `json:"period"` // as rate_limit's
	// Reason is why it is below the limit ("" when it is the limit).
	Reason string     `json:"reason,omitempty"`
	Since  *time.Time `json:"since"` // null when it is the limit or the slots' pace
}

// Breaker is the destination's circuit breaker (see limits.BreakerPolicy).
// Times are null when they do not apply.
type Breaker struct {
	// State: "closed", "open" (events held, waiting for the next probe) or
	// "probing" (open, the probe in flight).
	State string `json:"state"`
	// ConsecutiveFailures counts the endpoint failures in a row while closed.
	ConsecutiveFailures int        `json:"consecutive_failures"`
	FailingSince        *time.Time `json:"failing_since"`
	OpenedAt            *time.Time `json:"opened_at"`
	NextProbe           *time.Time `json:"next_probe"`
	LastError           string     `json:"last_error,omitempty"`
	LastErrorAt         *time.Time `json:"last_error_at"`
	// SlowStartSince: closed since then, the rate still ramping up.
	SlowStartSince *time.Time `json:"slow_start_since"`
}

func breakerView(b limits.Breaker) Breaker {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	return Breaker{State: b.State, ConsecutiveFailures: b.Failures, FailingSince: at(b.FailingSince), OpenedAt: at(b.OpenedAt),
		NextProbe: at(b.NextProbe), LastError: b.LastError, LastErrorAt: at(b.LastErrorAt), SlowStartSince: at(b.RampingSince)}
}

// Counts: Scheduled, Retrying and Pending are live: the subscriber's
// deliveries parked (waiting for their time, a backoff, a cooldown, a
// resume or a closed breaker) that no request was made for yet
// (Scheduled) or that were tried before (Retrying), and those handed to
// asynq and not yet taken (Pending); the rest are the worker's all-time
// counters (worker.ReadStats).
type Counts struct {
	Delivered int64 `json:"delivered"`
	Scheduled int64 `json:"scheduled"`
	Retrying  int64 `json:"retrying"`
	Pending   int64 `json:"pending"`
	Dead      int64 `json:"dead"`
	Failed    int64 `json:"failed"`
	Deferred  int64 `json:"deferred"`
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	sub, err := s.p.GetSubscriber(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	st, err := s.statuses(r.Context(), []tasks.Subscriber{sub})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st[0])
	return nil
}

// endCooldown ends a subscriber's cooldown now, an operator's lever for an
// endpoint that asked for too long (a Retry-After, a spent quota): its
// parked deliveries are handed out at once, at its pace. It answers the
// status as it is after.
func (s *Server) endCooldown(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.p.EndCooldown(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	return s.status(w, r)
}

// statuses reads the status of each of subs in one round trip (one per
// Cluster node), so that a page of subscribers costs its size: the API's
// status and the console's pages show the same figures from the same reads.
func (s *Server) statuses(ctx context.Context, subs []tasks.Subscriber) ([]Status, error) {
	if len(subs) == 0 {
		return nil, nil
	}
	type reads struct {
		cool                               *redis.StringCmd
		rec, stats                         *redis.MapStringStringCmd
		inflight, parked, retrying, handed *redis.IntCmd
	}
	rs := make([]reads, len(subs))
	var now *redis.TimeCmd
	keys := tasks.Keys(s.cfg.Namespace)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx) // cooldowns are kept in Redis' clock
		for i, sub := range subs {
			k := keys.Gates(sub.ID)
			rs[i] = reads{cool: p.Get(ctx, k.Cooldown), rec: p.HGetAll(ctx, k.Record),
				inflight: s.gates.InFlightIn(ctx, p, k), stats: p.HGetAll(ctx, keys.Stats(sub.ID))} // worker.ReadStats' hash
			rs[i].parked, rs[i].retrying, rs[i].handed = s.gates.ParkedIn(ctx, p, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: %v", producer.ErrRedisUnavailable, err)
	}
	out := make([]Status, len(subs))
	for i, sub := range subs {
		r := rs[i]
		st := Status{SubscriberID: sub.ID, Paused: sub.Paused, PauseReason: sub.PauseReason, MaxInFlight: sub.MaxInFlight,
			RateLimit: view(sub).RateLimit}
		if until := limits.ParseCooldown(r.cool.Val()); until.After(now.Val()) {
			st.CoolingUntil = &until
		}
		if ended := limits.ReadCooldownEnded(r.rec.Val()); !ended.IsZero() {
			ended = ended.UTC()
			st.CooldownEndedByOperatorAt = &ended
		}
		st.InFlight = r.inflight.Val()
		st.Breaker = breakerView(limits.ReadBreaker(r.rec.Val(), now.Val()))
		eff := limits.ReadEffective(r.rec.Val(), sub.Limit, sub.MaxInFlight, now.Val())
		st.EffectiveRate = EffectiveRate{Rate: math.Round(eff.Rate*100) / 100, Period: st.RateLimit.Period, Reason: eff.Reason}
		if !eff.Since.IsZero() {
			since := eff.Since.UTC()
			st.EffectiveRate.Since = &since
		}
		counts := worker.ParseCounts(r.stats.Val())
		// read in one pipeline, not one step: a delivery may move between them
		retrying := min(r.retrying.Val(), r.parked.Val())
		st.Counts = Counts{Delivered: counts["delivered"], Failed: counts["failed"], Scheduled: r.parked.Val() - retrying,
			Retrying: retrying, Pending: r.handed.Val()}
		for k, v := range counts {
			switch {
			case strings.HasPrefix(k, "dead:"):
				st.Counts.Dead += v
			case strings.HasPrefix(k, "deferred:"):
				st.Counts.Deferred += v
			}
		}
		out[i] = st
	}
	return out, nil
}
