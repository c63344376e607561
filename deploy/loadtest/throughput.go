package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
)

// ThroughputSpec sizes the throughput scenario.
type ThroughputSpec struct {
	Subscribers int // fast endpoints with limits far above what can be sent
	Events      int // each fanned out to every subscriber
}

func (e *env) throughputSpec() ThroughputSpec {
	if e.cfg.Throughput != nil {
		return *e.cfg.Throughput
	}
	return ThroughputSpec{Subscribers: 10, Events: e.scale(2000)}
}

// Throughput compares hooklane's delivery rate with the floor's.
type Throughput struct {
	Subscribers int        `json:"subscribers"`
	Tasks       int        `json:"tasks"`
	Floor       PathResult `json:"floor"`
	Hooklane    PathResult `json:"hooklane"`
	Ratio       float64    `json:"ratio"` // hooklane ÷ floor deliveries per second
	Target      float64    `json:"target"`
}

// PathResult is one path's delivery of the same backlog.
type PathResult struct {
	Deliveries int       `json:"deliveries"`
	PerSec     float64   `json:"deliveries_per_s"` // between the 5th and the 95th percentile arrival
	Seconds    float64   `json:"seconds"`          // first → last arrival
	Redis      RedisCost `json:"redis"`
	PeakRSSMiB float64   `json:"peak_rss_mib"`
	// CPU per delivery in microseconds: the server process (subprocess
	// only) and this process (the receiver).
	ServerCPU  float64 `json:"server_cpu_usec_per_delivery"`
	HarnessCPU float64 `json:"harness_cpu_usec_per_delivery"`
}

// runThroughput queues the same backlog twice, for the floor and for
// hooklane, before starting the server that drains it, so that publishing
// costs neither path anything; then it lets each server drain it alone.
func (e *env) runThroughput(ctx context.Context, r *ScenarioReport) error {
	ts := e.throughputSpec()
	tp := &Throughput{Subscribers: ts.Subscribers, Tasks: ts.Subscribers * ts.Events, Target: 0.8}
	r.Throughput = tp
	r.About = fmt.Sprintf("%d events × %d fast subscribers queued up front, drained by a plain asynq floor, then by hooklane", ts.Events, ts.Subscribers)
	if !e.cfg.ExternalWorkers {
		fl, err := e.runFloor(ctx, ts)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		tp.Floor = fl
	} else {
		r.Notes = append(r.Notes, "floor not run: workers are external")
	}

	subs := make([]subSpec, ts.Subscribers)
	for i := range subs {
		subs[i] = subSpec{ID: fmt.Sprintf("tput-%02d", i), Role: "fast, high limit", EventTypes: []string{"bench.tput"},
			Endpoint: Endpoint{Kind: Fast}, Limit: limits.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}, MaxInFlight: 1000}
	}
	ns := e.namespace(ScenarioThroughput)
	p, err := producer.New(&producer.Config{Redis: e.rdb, Namespace: ns, Logger: e.log})
	if err != nil {
		return err
	}
	for _, s := range subs {
		if err := e.register(ctx, p, s); err != nil {
			return err
		}
	}
	led := newLedger()
	gen := &Generator{P: p, Ledger: led}
	queued := time.Now()
	r.Generator = gen.Run(ctx, queued, burst("tp", "bench.tput", ts.Events, 0, 0), false)

	before, err := e.redisSnapshot(ctx)
	if err != nil {
		return err
	}
	e.probe.take()
	start, self0 := time.Now(), selfCPU()
	w, err := e.startWorker(ctx, ns)
	if err != nil {
		return err
	}
	want := 0
	for _, s := range subs {
		want += led.Count(s.ID)
	}
	count := func() int {
		n := 0
		for _, s := range subs {
			n += e.recv.Count(s.ID)
		}
		return n
	}
	// Polls only the receiver, in this process: Redis' counters between
	// the two snapshots are the worker's alone.
	if !waitFor(ctx, e.cfg.Timeout, func() bool { return count() >= want }) {
		r.Notes = append(r.Notes, fmt.Sprintf("hooklane delivered %d of %d before the timeout", count(), want))
	}
	after, serr := e.redisSnapshot(ctx)
	wcpu, self := w.CPU(), selfCPU()-self0
	if !waitFor(ctx, time.Minute, func() bool { return e.settled(ctx, ns) }) {
		r.Notes = append(r.Notes, "queue did not settle")
	}
	end := time.Now()
	rss, werr := w.Stop()
	if err := errors.Join(serr, werr); err != nil {
		return err
	}
	p99, worst := e.probe.take()
	r.ProbeP99Ms, r.ProbeMaxMs = ms(p99), ms(worst)
	if _, err := e.collect(ctx, r, ns, subs, led, start, end); err != nil {
		return err
	}
	var at []time.Time
	for _, s := range subs {
		for _, a := range e.recv.Arrivals(s.ID) {
			at = append(at, a.At)
		}
	}
	tp.Hooklane = pathResult(at, after.sub(before), rss, wcpu, self)
	r.Redis = tp.Hooklane.Redis
	r.WorkerPeakRSSMiB = tp.Hooklane.PeakRSSMiB
	r.WorkerCPUPerDelivery, r.HarnessCPUPerDelivery = tp.Hooklane.ServerCPU, tp.Hooklane.HarnessCPU
	r.DeliveriesPerSec = tp.Hooklane.PerSec
	r.WallSeconds = end.Sub(start).Seconds()
	tp.Ratio = ratio(tp.Hooklane.PerSec, tp.Floor.PerSec)
	if err := e.chart(r); err != nil {
		r.Notes = append(r.Notes, "chart: "+err.Error())
	}
	r.finish(ms(e.cfg.MaxLag))
	return nil
}

// runFloor queues ts's backlog as plain floor tasks aimed at fast
// endpoints of the same receiver and measures the floor draining it.
func (e *env) runFloor(ctx context.Context, ts ThroughputSpec) (PathResult, error) {
	queue := e.namespace("floor")
	ids := make([]string, ts.Subscribers)
	for i := range ids {
		ids[i] = fmt.Sprintf("floor-%02d", i)
		if _, err := e.recv.Add(Endpoint{ID: ids[i], Kind: Fast}); err != nil {
			return PathResult{}, err
		}
	}
	client := asynq.NewClientFromRedisClient(e.rdb)
	n := ts.Events * ts.Subscribers
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				ev := event(fmt.Sprintf("fl-%06d", i/ts.Subscribers), "bench.tput", i/ts.Subscribers)
				ev.Timestamp = time.Now().UTC().Truncate(time.Second)
				body, _ := json.Marshal(ev) // what hooklane sends: {id, type, timestamp, data}
				payload, _ := json.Marshal(FloorPost{URL: e.recv.URL(ids[i%ts.Subscribers]), Body: body})
				if _, err := client.EnqueueContext(ctx, asynq.NewTask(TypeFloorPost, payload, asynq.Queue(queue))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return PathResult{}, err
	}
	before, err := e.redisSnapshot(ctx)
	if err != nil {
		return PathResult{}, err
	}
	self0 := selfCPU()
	f, err := e.startFloor(ctx, queue)
	if err != nil {
		return PathResult{}, err
	}
	count := func() int {
		c := 0
		for _, id := range ids {
			c += e.recv.Count(id)
		}
		return c
	}
	ok := waitFor(ctx, e.cfg.Timeout, func() bool { return count() >= n })
	after, serr := e.redisSnapshot(ctx)
	fcpu, self := f.CPU(), selfCPU()-self0
	waitFor(ctx, 30*time.Second, func() bool { return e.settled(ctx, queue) })
	rss, ferr := f.Stop()
	if err := errors.Join(serr, ferr); err != nil {
		return PathResult{}, err
	}
	if !ok {
		return PathResult{}, fmt.Errorf("floor delivered %d of %d before the timeout", count(), n)
	}
	var at []time.Time
	for _, id := range ids {
		for _, a := range e.recv.Arrivals(id) {
			at = append(at, a.At)
		}
	}
	return pathResult(at, after.sub(before), rss, fcpu, self), nil
}

func pathResult(at []time.Time, d redisStats, rss int64, server, harness time.Duration) PathResult {
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	pr := PathResult{Deliveries: len(at), Redis: redisCost(d, len(at), false), PeakRSSMiB: float64(rss) / (1 << 20),
		ServerCPU: perDelivery(server, len(at)), HarnessCPU: perDelivery(harness, len(at))}
	if len(at) < 20 {
		return pr
	}
	pr.Seconds = at[len(at)-1].Sub(at[0]).Seconds()
	// The middle 90% leaves out the start-up (first poll, connections) and
	// the tail (the last few tasks of a drained queue).
	lo, hi := int(math.Floor(0.05*float64(len(at)))), int(math.Ceil(0.95*float64(len(at))))-1
	if span := at[hi].Sub(at[lo]).Seconds(); span > 0 {
		pr.PerSec = float64(hi-lo) / span
	}
	return pr
}

// perDelivery is d in microseconds per delivery.
func perDelivery(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}
