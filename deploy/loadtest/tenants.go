package loadtest

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hooklane/hooklane/producer"
)

// TenantsSpec sizes the tenants scenario (issue 34, requirement 4: a
// tenant with 1,000 busy subscribers does not delay another tenant's one
// subscriber). Zero fields of an override take the defaults.
type TenantsSpec struct {
	BigSubscribers int // the big tenant's fast subscribers; default 1,000 × scale
	BigEvents      int // the big tenant's events, each fanned out to all its subscribers; default 20
	SmallEvents    int // the small tenant's events to its one subscriber, alone and again together; default 20
	// Window is how long each tenant's events are spread over, evenly:
	// the big tenant's from the phase's start, the small tenant's half a
	// step later, so that they fall between the big tenant's. Default 10s:
	// each big subscriber gets 2 events a second, 2,000 deliveries a
	// second offered at the default size, about what one worker on 2
	// cores drains (deploy/BENCHMARKS.md), so that the big tenant is busy.
	Window time.Duration
}

func (e *env) tenantsSpec() TenantsSpec {
	var ts TenantsSpec
	if e.cfg.Tenants != nil {
		ts = *e.cfg.Tenants
	}
	// Capped as the trickle's subscribers are: each is a listening port of
	// this process and a connection from the worker.
	ts.BigSubscribers = cmp.Or(ts.BigSubscribers, min(e.scale(1000), maxTrickleSubscribers))
	ts.BigEvents, ts.SmallEvents = cmp.Or(ts.BigEvents, 20), cmp.Or(ts.SmallEvents, 20)
	ts.Window = cmp.Or(ts.Window, 10*time.Second)
	return ts
}

// The two tenants, their subscribers' ids and the one event type both
// publish: each tenant's subscribers are matched against its own
// tenant's events only, so the small subscriber getting one of the big
// tenant's events would be a leak (Tenants.Stray).
const (
	tenantBig     = "bench-big"
	tenantSmall   = "bench-small"
	tenantSmallID = "tenants-small"
	tenantsType   = "bench.tenants.event"
)

// The warm-up subscriber (the default tenant's, left out of the figures
// and of collect; warmUp) and how many events it gets at once before the
// first phase.
const (
	tenantsWarmID     = "tenants-warmup"
	tenantsWarmType   = "bench.tenants.warmup"
	tenantsWarmEvents = 20
)

// tenantsSubs are the big tenant's n subscribers, then the small tenant's
// one: all fast endpoints (200 at once, on 127.0.0.1) with limits far
// above the traffic (fastSub, as the throughput and trickle scenarios'),
// so that neither a limit nor an endpoint paces them, only the workers.
func tenantsSubs(n int) []subSpec {
	subs := make([]subSpec, n, n+1)
	for i := range subs {
		subs[i] = fastSub(fmt.Sprintf("tenants-big-%04d", i), tenantsType, "big tenant's subscriber")
		subs[i].Tenant = tenantBig
	}
	small := fastSub(tenantSmallID, tenantsType, "small tenant's only subscriber")
	small.Tenant, small.Fast = tenantSmall, true
	return append(subs, small)
}

// tenantsShots are the schedules: the small tenant's events alone, then
// together the small tenant's (new ids, the same times) and the big
// tenant's, each spread over the window, the small ones half a small step
// in, so that every one is published while the big tenant publishes.
func tenantsShots(ts TenantsSpec) (alone, small, big []Shot) {
	half := ts.Window / time.Duration(2*ts.SmallEvents)
	return burst("ta", tenantsType, ts.SmallEvents, ts.Window, half),
		burst("ts", tenantsType, ts.SmallEvents, ts.Window, half),
		burst("tb", tenantsType, ts.BigEvents, ts.Window, 0)
}

// runTenants registers two tenants, a big one with many subscribers and a
// small one with one, publishes the small tenant's events alone, waits
// for them, then publishes both tenants' events together, and compares
// the small subscriber's publish → delivery. Every subscriber is
// registered before the first phase, so that the phases differ by the
// big tenant's traffic only.
func (e *env) runTenants(ctx context.Context, r *ScenarioReport) error {
	ts := e.tenantsSpec()
	subs := tenantsSubs(ts.BigSubscribers)
	alone, small, big := tenantsShots(ts)
	tn := &Tenants{BigTenant: tenantBig, SmallTenant: tenantSmall, BigSubscribers: ts.BigSubscribers, BigEvents: ts.BigEvents,
		SmallEvents: ts.SmallEvents, WindowS: ts.Window.Seconds(), Target: tenantsTarget}
	r.Tenants = tn
	r.About = fmt.Sprintf("after %d warm-up events, tenant %s: %d events over %s to its 1 subscriber alone; then again (new ids) while tenant %s publishes %d events over the same %s, each to its %s (%d deliveries); all fast subscribers, one event type",
		tenantsWarmEvents, tenantSmall, ts.SmallEvents, ts.Window, tenantBig, ts.BigEvents, ts.Window, plural(ts.BigSubscribers, "subscriber", "subscribers"), ts.BigEvents*ts.BigSubscribers)
	var operator *producer.Producer
	err := e.scenario(ctx, r, ScenarioTenants, subs, func(ctx context.Context, sc *run) error {
		operator = sc.p
		ps := map[string]*producer.Producer{}
		for _, name := range []string{tenantBig, tenantSmall} {
			if _, _, err := sc.p.PutTenant(ctx, name, producer.TenantSettings{}); err != nil {
				return err
			}
			p, err := sc.p.Tenant(name)
			if err != nil {
				return err
			}
			ps[name] = p
		}
		for _, s := range subs {
			if err := e.register(ctx, ps[s.Tenant], s); err != nil {
				return err
			}
		}
		if err := e.warmUp(ctx, sc.p, tenantsWarmID, tenantsWarmType, tenantsWarmEvents); err != nil {
			return err
		}
		smallGen, bigGen := &Generator{P: ps[tenantSmall], Ledger: sc.led}, &Generator{P: ps[tenantBig], Ledger: sc.led}
		aloneAt := time.Now()
		g1 := smallGen.Run(ctx, aloneAt, alone, true)
		if !waitFor(ctx, e.cfg.Timeout, func() bool { return e.recv.Count(tenantSmallID) >= sc.led.Count(tenantSmallID) }) {
			r.Notes = append(r.Notes, "the small tenant's events alone did not finish delivering")
		}
		togetherAt := time.Now()
		var g3 GenStats
		var wg sync.WaitGroup
		wg.Go(func() { g3 = bigGen.Run(ctx, togetherAt, big, true) })
		g2 := smallGen.Run(ctx, togetherAt, small, true)
		wg.Wait()
		r.Generator = mergeGen(mergeGen(g1, g2), g3)
		sc.phases = func(o map[string]*outcome) {
			tn.measure(o, subs, aloneAt, togetherAt)
			tn.PeakQueue = peakQueue(r.Queue, togetherAt.Sub(sc.start).Seconds())
			if tn.Stray > 0 {
				r.Failures = append(r.Failures, fmt.Sprintf("%d deliveries of events never published to their subscriber (another tenant's?)", tn.Stray))
			}
		}
		return nil
	})
	if err == nil && e.cfg.ExternalWorkers && operator != nil {
		_ = operator.DeleteSubscriber(ctx, tenantsWarmID)
		for _, name := range []string{tenantBig, tenantSmall} {
			_ = operator.DeleteTenant(ctx, name) // the deployment keeps no bench tenants
		}
	}
	return err
}

// peakQueue is the largest backlog sampled from second from on.
func peakQueue(qs []QueueSample, from float64) int64 {
	var peak int64
	for _, q := range qs {
		if q.T >= from {
			peak = max(peak, q.Backlog())
		}
	}
	return peak
}
