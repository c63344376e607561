package loadtest

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/hooklane/hooklane/limits"
)

// TrickleSpec sizes the trickle scenario. Zero fields of an override
// take the defaults, but Rounds takes 1, as a ThroughputSpec's does.
type TrickleSpec struct {
	Subscribers int     // fast endpoints, each with an event type of its own; default 1,000 × scale
	Sweeps      int     // events each subscriber gets a round, one at a time; default 5
	Rate        float64 // events published a second, all subscribers together; default 1,000
	// Rounds alternate floor and hooklane, as the throughput scenario's
	// do, and the medians are compared. Default 3.
	Rounds int
}

// maxTrickleSubscribers caps Subscribers at a large -scale: each is two
// listening ports of this process (its endpoint and the floor's) and a
// connection from the server delivering, under one limit of open files.
const maxTrickleSubscribers = 3000

func (e *env) trickleSpec() TrickleSpec {
	ts, rounds := TrickleSpec{}, 3
	if e.cfg.Trickle != nil {
		ts, rounds = *e.cfg.Trickle, max(e.cfg.Trickle.Rounds, 1)
	}
	ts.Subscribers = cmp.Or(ts.Subscribers, min(e.scale(1000), maxTrickleSubscribers))
	ts.Sweeps, ts.Rate, ts.Rounds = cmp.Or(ts.Sweeps, 5), cmp.Or(ts.Rate, 1000), rounds
	return ts
}

// Trickle compares hooklane's CPU per delivery with the floor's when every
// event finds its subscriber idle: the single-delivery path, publishing
// included, where the throughput scenario measures drains of a backlog.
type Trickle struct {
	Subscribers    int          `json:"subscribers"`
	Sweeps         int          `json:"sweeps"`
	Rate           float64      `json:"publish_rate_per_s"`
	Deliveries     int          `json:"deliveries_per_round"`
	Floor          PathResult   `json:"floor"`    // one asynq Server, the median round by CPU
	Hooklane       PathResult   `json:"hooklane"` // the median round by CPU
	FloorRounds    []PathResult `json:"floor_rounds"`
	HooklaneRounds []PathResult `json:"hooklane_rounds"`
	// CPURatio is hooklane's CPU per delivery (Redis, the servers, this
	// process: publisher and receiver) ÷ the floor's, the median rounds; 0
	// when the servers' CPU is unknown (in-process).
	CPURatio float64 `json:"cpu_ratio,omitempty"`
	// RunsPerDelivery is hooklane's handler runs per delivery, every round:
	// 1 when no event waited behind another.
	RunsPerDelivery float64 `json:"runs_per_delivery"`
	// Latency is hooklane's publish → delivery over every event.
	Latency Latency `json:"latency"`
}

// trickleType is subscriber i's own event type: each event goes to one
// subscriber.
func trickleType(i int) string { return fmt.Sprintf("bench.trickle.%04d", i) }

// trickleSubs are n fast subscribers, subscriber i taking trickleType(i)
// only.
func trickleSubs(n int) []subSpec {
	subs := make([]subSpec, n)
	for i := range subs {
		subs[i] = fastSub(fmt.Sprintf("trickle-%04d", i), trickleType(i), "fast, high limit, one event at a time")
	}
	return subs
}

// fastSub is a fast subscriber of one event type with limits far above
// the traffic, as the throughput scenario's.
func fastSub(id, typ, role string) subSpec {
	return subSpec{ID: id, Role: role, EventTypes: []string{typ}, Endpoint: Endpoint{Kind: Fast},
		Limit: limits.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}, MaxInFlight: 1000}
}

// trickleShots is a round's schedule: sweep s publishes subscriber i's
// event at (s·n + i)/rate, so each subscriber gets one every n/rate, long
// after its previous one was delivered: no backlog, ever.
func trickleShots(prefix string, n, sweeps int, rate float64) []Shot {
	shots := make([]Shot, n*sweeps)
	for k := range shots {
		at := time.Duration(float64(k) / rate * float64(time.Second))
		shots[k] = Shot{At: at, Event: event(fmt.Sprintf("%s-%06d", prefix, k), trickleType(k%n), k)}
	}
	return shots
}

// runTrickle starts the server first and publishes while it runs, each
// subscriber one event at a time, so that a round costs what publishing
// and delivering single events cost on each path; the floor and hooklane
// take turns.
func (e *env) runTrickle(ctx context.Context, r *ScenarioReport) error {
	ts := e.trickleSpec()
	n := ts.Subscribers
	tr := &Trickle{Subscribers: n, Sweeps: ts.Sweeps, Rate: ts.Rate, Deliveries: n * ts.Sweeps}
	r.Trickle = tr
	r.About = fmt.Sprintf("%s with an event type each, %d events each a round published one at a time at %.0f/s while the server runs (%d deliveries a round, no backlog), by a plain asynq floor and by hooklane in turn, %s each",
		plural(n, "fast subscriber", "fast subscribers"), ts.Sweeps, ts.Rate, tr.Deliveries, plural(ts.Rounds, "round", "rounds"))
	floorIDs, floorURLs := make([]string, n), map[string]string{} // event type → the floor's endpoint
	addFloor := func(id, typ string) error {
		url, err := e.recv.Add(Endpoint{ID: id, Kind: Fast})
		floorURLs[typ] = url
		return err
	}
	for i := range n {
		floorIDs[i] = fmt.Sprintf("floor-trickle-%04d", i)
		if err := addFloor(floorIDs[i], trickleType(i)); err != nil {
			return err
		}
	}
	if err := addFloor(trickleFloorWarmID, trickleWarmType); err != nil {
		return err
	}
	subs := trickleSubs(n)
	ns := e.namespace(ScenarioTrickle)
	p, err := e.producer(ns)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if err := e.register(ctx, p, s); err != nil {
			return err
		}
	}
	// The warm-up subscriber is not measured: its events are left out of
	// the rounds' figures and of collect.
	if err := e.register(ctx, p, fastSub(trickleWarmID, trickleWarmType, "warm-up")); err != nil {
		return err
	}
	led := newLedger()
	if e.cfg.ExternalWorkers {
		r.Notes = append(r.Notes, "floor not run: workers are external")
	}
	e.probe.take()
	start := time.Now()
	for round := range ts.Rounds {
		if !e.cfg.ExternalWorkers {
			fl, gen, err := e.trickleFloorRound(ctx, ts, round, floorIDs, floorURLs)
			if err != nil {
				return fmt.Errorf("floor: %w", err)
			}
			r.Generator = mergeGen(r.Generator, gen)
			tr.FloorRounds = append(tr.FloorRounds, fl)
		}
		hl, gs, err := e.trickleHooklaneRound(ctx, ts, round, ns, p, led, subIDs(subs))
		if err != nil {
			return err
		}
		r.Generator = mergeGen(r.Generator, gs)
		tr.HooklaneRounds = append(tr.HooklaneRounds, hl)
	}
	if !waitFor(ctx, time.Minute, func() bool { return e.settled(ctx, e.stockOf(ctx, ns)) }) {
		r.Notes = append(r.Notes, "queue did not settle")
	}
	end := time.Now()
	p99, worst, stalls := e.probe.take()
	r.ProbeP99Ms, r.ProbeMaxMs = ms(p99), ms(worst)
	e.stalls = stalls
	outs, err := e.collect(ctx, r, ns, subs, led, start, end)
	if err != nil {
		return err
	}
	var lat []time.Duration
	for _, o := range outs {
		lat = append(lat, o.latencies...)
	}
	tr.Latency, tr.RunsPerDelivery = latencyOf(lat), r.RunsPerDelivery
	tr.Floor, tr.Hooklane = cpuMedian(tr.FloorRounds), cpuMedian(tr.HooklaneRounds)
	tr.CPURatio = ratio(tr.Hooklane.CPU(), tr.Floor.CPU())
	r.Redis = tr.Hooklane.Redis
	r.WorkerPeakRSSMiB, r.Workers = tr.Hooklane.PeakRSSMiB, tr.Hooklane.Processes
	r.QueueShards = e.shardsOf(ctx, ns)
	r.WorkerCPUPerDelivery, r.HarnessCPUPerDelivery = tr.Hooklane.ServerCPU, tr.Hooklane.HarnessCPU
	r.DeliveriesPerSec = tr.Hooklane.PerSec
	r.WallSeconds = end.Sub(start).Seconds()
	if err := e.chart(r); err != nil {
		r.Notes = append(r.Notes, "chart: "+err.Error())
	}
	if e.cfg.ExternalWorkers {
		for _, id := range append(subIDs(subs), trickleWarmID) {
			_ = p.DeleteSubscriber(ctx, id) // the deployment keeps no bench subscribers
		}
	}
	r.finish(ms(e.cfg.MaxLag))
	return nil
}
