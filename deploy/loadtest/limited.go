package loadtest

import (
	"context"
	"fmt"
	"time"

	"github.com/hooklane/hooklane/limits"
)

// LimitedSpec sizes the limited scenario: one subscriber registered at
// Rate a second whose endpoint takes Below times less, as the demo's
// demo-limited does, and answers the rest 429 with RetryAfter.
type LimitedSpec struct {
	Events     int           // published at once
	Rate       int           // the registered limit a second (burst the same)
	Below      float64       // how many times below it the endpoint's own rate is
	RetryAfter time.Duration // what its 429s ask for
}

func (e *env) limitedSpec() LimitedSpec {
	if e.cfg.Limited != nil {
		return *e.cfg.Limited
	}
	return LimitedSpec{Events: e.scale(150), Rate: 10, Below: 5, RetryAfter: 3 * time.Second}
}

// settleAfter is how long the effective rate is given to learn an
// endpoint's before its 429s count as settled (SubReport.SettledThrottledPerMin).
const settleAfter = 10 * time.Second

// runLimited publishes a backlog at once to a subscriber registered 5×
// above what its endpoint takes: the effective rate has to learn the
// endpoint's from its 429s, each of which stops the destination for the
// Retry-After. The report gives the 429s a minute, over the drain and
// after its first 10 s.
func (e *env) runLimited(ctx context.Context, r *ScenarioReport) error {
	v := e.limitedSpec()
	rate := float64(v.Rate) / v.Below
	sub := subSpec{ID: "limited", Role: fmt.Sprintf("endpoint %g× below its limit", v.Below), EventTypes: []string{"limited.tick"},
		Endpoint: Endpoint{Kind: RateEnforcing, Rate: rate, Burst: max(1, int(rate)), RetryAfter: v.RetryAfter},
		Limit:    limits.Limit{Rate: v.Rate, Burst: v.Rate, Period: time.Second}, MaxInFlight: 10}
	r.About = fmt.Sprintf("%d events published at once to a subscriber registered at %d/s whose endpoint takes %g/s (Retry-After %s)",
		v.Events, v.Rate, rate, v.RetryAfter)
	return e.scenario(ctx, r, ScenarioLimited, []subSpec{sub}, func(ctx context.Context, sc *run) error {
		if err := e.register(ctx, sc.p, sub); err != nil {
			return err
		}
		r.Generator = sc.gen.Run(ctx, time.Now(), burst("lt", "limited.tick", v.Events, 0, 0), true)
		return nil
	})
}

// throttlesPerMinute is how many of the 429s answered at times at a
// minute there were from the first request to the last (requests,
// sorted), and from settle after the first on; 0 where that span is
// empty.
func throttlesPerMinute(at, requests []time.Time, settle time.Duration) (all, settled float64) {
	if len(requests) == 0 {
		return 0, 0
	}
	first, last := requests[0], requests[len(requests)-1]
	from := first.Add(settle)
	late := 0
	for _, t := range at {
		if !t.Before(from) {
			late++
		}
	}
	if d := last.Sub(first).Minutes(); d > 0 {
		all = float64(len(at)) / d
	}
	if d := last.Sub(from).Minutes(); d > 0 {
		settled = float64(late) / d
	}
	return all, settled
}
