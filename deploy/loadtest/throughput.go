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
	Events      int // each fanned out to every subscriber, per round
	// Rounds alternate floor and hooklane, each draining a fresh backlog;
	// the medians are compared, because one drain of a few seconds on a
	// shared 2-core machine varies by a third from run to run. Default 3.
	Rounds int
}

func (e *env) throughputSpec() ThroughputSpec {
	ts := ThroughputSpec{Subscribers: e.cfg.ThroughputSubscribers, Events: e.scale(2000)}
	if e.cfg.Throughput != nil {
		ts = *e.cfg.Throughput
	}
	ts.Rounds = max(ts.Rounds, 1)
	if e.cfg.Throughput == nil {
		ts.Rounds = 3
	}
	return ts
}

// Throughput compares hooklane's delivery rate with the floor's.
type Throughput struct {
	Subscribers    int          `json:"subscribers"`
	Tasks          int          `json:"tasks_per_round"`
	Floor          PathResult   `json:"floor"`    // one asynq Server, the median round
	Hooklane       PathResult   `json:"hooklane"` // the median round
	FloorRounds    []PathResult `json:"floor_rounds"`
	HooklaneRounds []PathResult `json:"hooklane_rounds"`
	Ratio          float64      `json:"ratio"` // hooklane ÷ floor deliveries per second, medians
	// FloorServers above 1 adds a second floor with that many asynq
	// Servers in its one process (FloorMulti, its median round), to
	// compare with hooklane's several Servers per process, and hooklane's
	// ratio to it.
	FloorServers     int          `json:"floor_servers"`
	FloorMulti       *PathResult  `json:"floor_multi,omitempty"`
	FloorMultiRounds []PathResult `json:"floor_multi_rounds,omitempty"`
	RatioMulti       float64      `json:"ratio_multi,omitempty"`
	Target           float64      `json:"target"`
	// CPURatio is hooklane's CPU per delivery (Redis, the servers, the
	// receiver: PathResult.CPU) ÷ the floor's, the median rounds: what the
	// machine spends per delivery, steadier from run to run than the rates
	// on a host whose speed moves. 0 when the servers' CPU is unknown
	// (in-process).
	CPURatio float64 `json:"cpu_ratio,omitempty"`
}

// PathResult is one path's delivery of one backlog.
type PathResult struct {
	Deliveries int       `json:"deliveries"`
	PerSec     float64   `json:"deliveries_per_s"` // between the 5th and the 95th percentile arrival
	Seconds    float64   `json:"seconds"`          // first → last arrival
	Redis      RedisCost `json:"redis"`
	PeakRSSMiB float64   `json:"peak_rss_mib"` // summed over Processes
	// CPU per delivery in microseconds: the server processes, summed
	// (subprocesses only), and this process (the receiver).
	ServerCPU  float64 `json:"server_cpu_usec_per_delivery"`
	HarnessCPU float64 `json:"harness_cpu_usec_per_delivery"`
	// Processes are the workers (or the floor) that drained the backlog.
	Processes []ProcStats `json:"processes"`
}

// CPU is the path's CPU per delivery in microseconds, Redis' + the
// servers' + the receiver's; 0 when the servers' is unknown (in-process).
func (p PathResult) CPU() float64 {
	if p.ServerCPU == 0 {
		return 0
	}
	return p.Redis.CPUUsecPerDelivery + p.ServerCPU + p.HarnessCPU
}

// cpuRatio is CPURatio from the two median rounds (0: either's CPU
// unknown).
func (t *Throughput) cpuRatio() float64 { return ratio(t.Hooklane.CPU(), t.Floor.CPU()) }

// runThroughput queues a backlog before starting the server that drains
// it, so that publishing costs neither path anything, and lets the floor
// and hooklane drain one each in turn.
func (e *env) runThroughput(ctx context.Context, r *ScenarioReport) error {
	ts := e.throughputSpec()
	tp := &Throughput{Subscribers: ts.Subscribers, Tasks: ts.Subscribers * ts.Events, Target: 0.8, FloorServers: e.cfg.FloorServers}
	r.Throughput = tp
	floors := "a plain asynq floor"
	if e.cfg.FloorServers > 1 {
		floors = fmt.Sprintf("plain asynq floors of 1 and %d Servers", e.cfg.FloorServers)
	}
	r.About = fmt.Sprintf("%d events × %s (%d deliveries a round) queued up front, drained by %s and by hooklane in turn, %s each",
		ts.Events, plural(ts.Subscribers, "fast subscriber", "fast subscribers"), tp.Tasks, floors, plural(ts.Rounds, "round", "rounds"))
	floorIDs := make([]string, ts.Subscribers)
	for i := range floorIDs {
		floorIDs[i] = fmt.Sprintf("floor-%02d", i)
		if _, err := e.recv.Add(Endpoint{ID: floorIDs[i], Kind: Fast}); err != nil {
			return err
		}
	}
	subs := make([]subSpec, ts.Subscribers)
	for i := range subs {
		subs[i] = subSpec{ID: fmt.Sprintf("tput-%02d", i), Role: "fast, high limit", EventTypes: []string{"bench.tput"},
			Endpoint: Endpoint{Kind: Fast}, Limit: limits.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}, MaxInFlight: 1000}
	}
	ns := e.namespace(ScenarioThroughput)
	p, err := e.producer(ns)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if err := e.register(ctx, p, s); err != nil {
			return err
		}
	}
	led := newLedger()
	if e.cfg.ExternalWorkers {
		r.Notes = append(r.Notes, "floor not run: workers are external")
	}
	e.probe.take()
	start := time.Now()
	for round := range ts.Rounds {
		for _, servers := range e.floorSizes() {
			fl, err := e.floorRound(ctx, ts, round, floorIDs, servers)
			if err != nil {
				return fmt.Errorf("floor of %d Servers: %w", servers, err)
			}
			if servers == 1 {
				tp.FloorRounds = append(tp.FloorRounds, fl)
			} else {
				tp.FloorMultiRounds = append(tp.FloorMultiRounds, fl)
			}
		}
		hl, gen, err := e.hooklaneRound(ctx, ts, round, ns, p, led, subs)
		if err != nil {
			return err
		}
		r.Generator = mergeGen(r.Generator, gen)
		tp.HooklaneRounds = append(tp.HooklaneRounds, hl)
	}
	if !waitFor(ctx, time.Minute, func() bool { return e.settled(ctx, e.stockOf(ctx, ns)) }) {
		r.Notes = append(r.Notes, "queue did not settle")
	}
	end := time.Now()
	p99, worst, stalls := e.probe.take()
	r.ProbeP99Ms, r.ProbeMaxMs = ms(p99), ms(worst)
	e.stalls = stalls
	// No worker runs now, so collect sees the last counters; the
	// pre-queued events' latency is queueing time, not delivery.
	if _, err := e.collect(ctx, r, ns, subs, led, start, end); err != nil {
		return err
	}
	tp.Floor, tp.Hooklane = median(tp.FloorRounds), median(tp.HooklaneRounds)
	if len(tp.FloorMultiRounds) > 0 {
		m := median(tp.FloorMultiRounds)
		tp.FloorMulti, tp.RatioMulti = &m, ratio(tp.Hooklane.PerSec, m.PerSec)
	}
	r.Redis = tp.Hooklane.Redis
	r.WorkerPeakRSSMiB, r.Workers = tp.Hooklane.PeakRSSMiB, tp.Hooklane.Processes
	r.QueueShards = e.shardsOf(ctx, ns)
	r.WorkerCPUPerDelivery, r.HarnessCPUPerDelivery = tp.Hooklane.ServerCPU, tp.Hooklane.HarnessCPU
	r.DeliveriesPerSec = tp.Hooklane.PerSec
	r.WallSeconds = end.Sub(start).Seconds()
	tp.Ratio = ratio(tp.Hooklane.PerSec, tp.Floor.PerSec)
	tp.CPURatio = tp.cpuRatio()
	if err := e.chart(r); err != nil {
		r.Notes = append(r.Notes, "chart: "+err.Error())
	}
	r.finish(ms(e.cfg.MaxLag))
	return nil
}

// median returns the round with the median rate (the lower middle one of
// an even count).
func median(rs []PathResult) PathResult {
	if len(rs) == 0 {
		return PathResult{}
	}
	s := append([]PathResult(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return s[i].PerSec < s[j].PerSec })
	return s[(len(s)-1)/2]
}

// drain starts a server, waits until the receiver has want more arrivals
// on ids than it had, and measures what it cost. Between the two Redis
// snapshots only the receiver is polled (in this process), so Redis'
// counters are the server's alone.
func (e *env) drain(ctx context.Context, start func() (group, error), ids []string, want int, where func() stock) (PathResult, error) {
	base := map[string]int{}
	count := func() int {
		n := 0
		for _, id := range ids {
			n += e.recv.Count(id) - base[id]
		}
		return n
	}
	for _, id := range ids {
		base[id] = e.recv.Count(id)
	}
	before, err := e.redisSnapshot(ctx)
	if err != nil {
		return PathResult{}, err
	}
	self0 := selfCPU()
	srv, err := start()
	if err != nil {
		return PathResult{}, err
	}
	ok := waitFor(ctx, e.cfg.Timeout, func() bool { return count() >= want })
	after, serr := e.redisSnapshot(ctx)
	cpu, self := srv.CPU(), selfCPU()-self0
	waitFor(ctx, time.Minute, func() bool { return e.settled(ctx, where()) })
	// A worker counts a delivery once its outcome is committed, a moment
	// after the receiver saw it: its counts are read once the work settled.
	procs := srv.stats()
	rss, perr := srv.Stop()
	if err := errors.Join(serr, perr); err != nil {
		return PathResult{}, err
	}
	if !ok {
		return PathResult{}, fmt.Errorf("%s delivered %d of %d before the timeout", srv[0].name, count(), want)
	}
	var at []time.Time
	for _, id := range ids {
		for _, a := range e.recv.Arrivals(id)[base[id]:] {
			at = append(at, a.At)
		}
	}
	return pathResult(at, after.sub(before), withPeaks(procs, rss), cpu, self), nil
}

// floorSizes are the Server counts of the floors each round runs: none
// with external workers, 1, and FloorServers when it is more.
func (e *env) floorSizes() []int {
	switch {
	case e.cfg.ExternalWorkers:
		return nil
	case e.cfg.FloorServers > 1:
		return []int{1, e.cfg.FloorServers}
	}
	return []int{1}
}

// floorRound queues the backlog as plain floor tasks aimed at fast
// endpoints of the same receiver and measures a floor of servers asynq
// Servers draining it.
func (e *env) floorRound(ctx context.Context, ts ThroughputSpec, round int, ids []string, servers int) (PathResult, error) {
	queue := e.namespace("floor")
	client := asynq.NewClientFromRedisClient(e.rdb)
	n := ts.Events * ts.Subscribers
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				ev := event(fmt.Sprintf("fl%d-x%d-%06d", round, servers, i/ts.Subscribers), "bench.tput", i/ts.Subscribers)
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
	start := func() (group, error) {
		p, err := e.startFloor(ctx, queue, servers)
		if err != nil {
			return nil, err
		}
		return group{p}, nil
	}
	return e.drain(ctx, start, ids, n, func() stock { return onlyQueues(queue) })
}

// hooklaneRound publishes the backlog with no worker running, then
// measures a worker draining it.
func (e *env) hooklaneRound(ctx context.Context, ts ThroughputSpec, round int, ns string, p *producer.Producer, led *Ledger, subs []subSpec) (PathResult, GenStats, error) {
	gen := &Generator{P: p, Ledger: led}
	gs := gen.Run(ctx, time.Now(), burst(fmt.Sprintf("tp%d", round), "bench.tput", ts.Events, 0, 0), false)
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.ID
	}
	pr, err := e.drain(ctx, func() (group, error) { return e.startWorkers(ctx, ns) }, ids, ts.Events*len(subs), func() stock { return e.stockOf(ctx, ns) })
	return pr, gs, err
}

func pathResult(at []time.Time, d redisStats, procs []ProcStats, server, harness time.Duration) PathResult {
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	pr := PathResult{Deliveries: len(at), Redis: redisCost(d, len(at), false), PeakRSSMiB: sumRSS(procs),
		ServerCPU: perDelivery(server, len(at)), HarnessCPU: perDelivery(harness, len(at)), Processes: procs}
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
