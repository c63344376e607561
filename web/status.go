package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
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

// Counts are a subscriber's deliveries by state, in the words of a
// delivery's state (tasks.States). Scheduled, Retrying, Cooling, Held and
// Pending are live: its parked deliveries by why they wait now (held while
// it is paused or its breaker open, cooling while a cooldown runs, else
// retrying when a request was made for one, scheduled when none was), and
// those handed to the workers and not yet taken (pending). Delivered,
// Dead, Failed and Deferred are all-time counters, since the subscriber
// was created (worker.ReadStats). Held and Cooling were added in issue 35:
// before, Scheduled and Retrying counted them too.
type Counts struct {
	Delivered int64 `json:"delivered"` // all-time
	Scheduled int64 `json:"scheduled"`
	Retrying  int64 `json:"retrying"`
	Cooling   int64 `json:"cooling"`
	Held      int64 `json:"held"`
	Pending   int64 `json:"pending"`
	Dead      int64 `json:"dead"`     // all-time
	Failed    int64 `json:"failed"`   // all-time: failed attempts
	Deferred  int64 `json:"deferred"` // all-time: runs put back to wait
}

// parkedCounts splits a subscriber's parked deliveries (its lot), tried
// of them a request was made for, by why they wait now (tasks.ParkedState):
// all held while it is paused or its breaker open; during a cooldown,
// cooling those due before it ends (dueInCooldown), and of the rest
// retrying those tried beyond the cooling ones (the tried are mostly
// the cooling: the 429 that started the cooldown; the split of the rest
// is exact when they are). The three reads are one pipeline's, not one
// step's: a delivery may move between them, hence the clamps.
func parkedCounts(g tasks.Gate, parked, tried int64, dueInCooldown *redis.IntCmd) (held, cooling, scheduled, retrying int64) {
	tried = min(tried, parked)
	switch tasks.ParkedState(false, time.Time{}, g) {
	case tasks.StateHeld:
		return parked, 0, 0, 0
	case tasks.StateCooling:
		if dueInCooldown != nil {
			cooling = min(dueInCooldown.Val(), parked)
		}
		retrying = min(max(tried-cooling, 0), parked-cooling)
		return 0, cooling, parked - cooling - retrying, retrying
	}
	return 0, 0, parked - tried, tried
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	sub, err := s.prod(r).GetSubscriber(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	st, err := s.statuses(r.Context(), s.prod(r), []tasks.Subscriber{sub})
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
	if _, err := s.prod(r).EndCooldown(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	return s.status(w, r)
}

// statuses reads the status of each of subs in one round trip (one per
// Cluster node), so that a page of subscribers costs its size: the API's
// status and the console's pages show the same figures from the same reads.
// subs are pr's (their ids its).
func (s *Server) statuses(ctx context.Context, pr *producer.Producer, subs []tasks.Subscriber) ([]Status, error) {
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
			k := keys.Gates(pr.StoredID(sub.ID))
			rs[i] = reads{cool: p.Get(ctx, k.Cooldown), rec: p.HGetAll(ctx, k.Record),
				inflight: s.gates.InFlightIn(ctx, p, k), stats: p.HGetAll(ctx, keys.Stats(pr.StoredID(sub.ID)))} // worker.ReadStats' hash
			rs[i].parked, rs[i].retrying, rs[i].handed = s.gates.ParkedIn(ctx, p, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: %v", producer.ErrRedisUnavailable, err)
	}
	// A cooldown holds back the parked deliveries due before it ends: one
	// more round trip counts them, for the subscribers cooling now.
	gates := make([]tasks.Gate, len(subs))
	dueInCooldown := make([]*redis.IntCmd, len(subs))
	cooling := false
	for i := range subs {
		gates[i] = producer.GateOf(rs[i].rec.Val(), rs[i].cool.Val(), now.Val())
		cooling = cooling || tasks.ParkedState(false, time.Time{}, gates[i]) == tasks.StateCooling
	}
	if cooling {
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sub := range subs {
				if g := gates[i]; tasks.ParkedState(false, time.Time{}, g) == tasks.StateCooling {
					dueInCooldown[i] = p.ZCount(ctx, keys.Gates(pr.StoredID(sub.ID)).Lot, "-inf", strconv.FormatInt(g.CoolingUntil.UnixMilli(), 10))
				}
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("%w: %v", producer.ErrRedisUnavailable, err)
		}
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
		st.Counts = Counts{Delivered: counts["delivered"], Failed: counts["failed"], Pending: r.handed.Val()}
		st.Counts.Held, st.Counts.Cooling, st.Counts.Scheduled, st.Counts.Retrying = parkedCounts(gates[i], r.parked.Val(),
			r.retrying.Val(), dueInCooldown[i])
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
