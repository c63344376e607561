package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/worker"
)

// Report is one run of the harness.
type Report struct {
	Started   time.Time         `json:"started"`
	Command   string            `json:"command"`
	Machine   string            `json:"machine"`
	Settings  map[string]string `json:"settings"`
	Topology  Topology          `json:"topology"`
	Scenarios []*ScenarioReport `json:"scenarios"`
}

// ScenarioReport is what one scenario measured.
type ScenarioReport struct {
	Name  string `json:"name"`
	About string `json:"about"`
	// Valid is false when the generator or the receiver fell behind its
	// schedule: the figures then describe the harness, not hooklane.
	Valid          bool     `json:"valid"`
	InvalidReasons []string `json:"invalid_reasons,omitempty"`
	// Hiding are the invalid reasons (each also in InvalidReasons) behind
	// which a broken invariant could go unseen, such as a limit violation
	// excused by a stall. Passed means little while there are any, and
	// TestSmallRunKeepsInvariants fails on them.
	Hiding []string `json:"hiding,omitempty"`
	// Passed is true when every invariant held: nothing lost, no request
	// before a Retry-After deadline, no ban, no limit exceeded, no bad
	// signature.
	Passed   bool     `json:"passed"`
	Failures []string `json:"failures,omitempty"`

	WallSeconds      float64   `json:"wall_s"`
	Generator        GenStats  `json:"generator"`
	ProbeP99Ms       float64   `json:"receiver_lag_p99_ms"`
	ProbeMaxMs       float64   `json:"receiver_lag_max_ms"`
	Published        int       `json:"published"`
	Delivered        int       `json:"delivered"`
	Dead             int       `json:"dead"`
	Lost             int       `json:"lost"`
	Duplicates       int       `json:"duplicates"`
	DeliveriesPerSec float64   `json:"deliveries_per_s"`
	HandlerRuns      int64     `json:"handler_runs"`
	RunsPerDelivery  float64   `json:"runs_per_delivery"`
	Redis            RedisCost `json:"redis"`
	// WorkerPeakRSSMiB sums the workers' peaks; Workers lists each.
	WorkerPeakRSSMiB float64     `json:"worker_peak_rss_mib"`
	Workers          []ProcStats `json:"workers,omitempty"`
	// QueueShards is the queue count per lane the scenario's namespace has.
	QueueShards int `json:"queue_shards"`
	// CPU per delivery in microseconds: the worker process (subprocess
	// only) and this process (generator and receiver).
	WorkerCPUPerDelivery  float64          `json:"worker_cpu_usec_per_delivery"`
	HarnessCPUPerDelivery float64          `json:"harness_cpu_usec_per_delivery"`
	Subscribers           []*SubReport     `json:"subscribers"`
	Latency               []LatencyCompare `json:"latency,omitempty"`
	Steps                 []Step           `json:"steps,omitempty"`
	Throughput            *Throughput      `json:"throughput,omitempty"`
	Trickle               *Trickle         `json:"trickle,omitempty"`
	Tenants               *Tenants         `json:"tenants,omitempty"`
	Queue                 []QueueSample    `json:"queue_backlog,omitempty"`
	Chart                 string           `json:"chart,omitempty"`
	Notes                 []string         `json:"notes,omitempty"`
}

// RedisCost is Redis work per delivery, from INFO before and after.
type RedisCost struct {
	CommandsPerDelivery   float64    `json:"commands_per_delivery"` // including commands run inside Lua scripts
	RoundTripsPerDelivery float64    `json:"round_trips_per_delivery"`
	UsecPerDelivery       float64    `json:"usec_per_delivery"`     // Redis time inside commands
	CPUUsecPerDelivery    float64    `json:"cpu_usec_per_delivery"` // Redis process CPU, I/O included
	Top                   []CmdShare `json:"top"`
	// TopTime is the commands that took Redis the most time, µs per
	// delivery (a script's time includes its commands').
	TopTime            []CmdShare `json:"top_time"`
	IncludesPublishing bool       `json:"includes_publishing"`
	// HarnessCommandsPerDelivery are the harness' own commands (its
	// queue samples and settle polls), left out of the figures above.
	HarnessCommandsPerDelivery float64 `json:"harness_commands_per_delivery,omitempty"`
	// Masters are each master's share of the figures above, which are
	// their sums (one entry on one server).
	Masters []NodeCost `json:"masters"`
}

// NodeCost is one Redis master's work per delivery (of all deliveries).
type NodeCost struct {
	Addr                  string  `json:"addr"`
	CommandsPerDelivery   float64 `json:"commands_per_delivery"`
	RoundTripsPerDelivery float64 `json:"round_trips_per_delivery"`
	CPUUsecPerDelivery    float64 `json:"cpu_usec_per_delivery"`
}

// CmdShare is one command's calls per delivery.
type CmdShare struct {
	Cmd         string  `json:"cmd"`
	PerDelivery float64 `json:"per_delivery"`
}

func redisCost(d redisStats, deliveries int, publishing bool) RedisCost {
	if deliveries == 0 {
		return RedisCost{}
	}
	n := float64(deliveries)
	c := RedisCost{CommandsPerDelivery: float64(d.total()) / n, RoundTripsPerDelivery: float64(d.Reads) / n,
		UsecPerDelivery: float64(d.Usec) / n, CPUUsecPerDelivery: float64(d.CPU) / float64(time.Microsecond) / n, IncludesPublishing: publishing}
	for k, v := range d.Calls {
		c.Top = append(c.Top, CmdShare{Cmd: k, PerDelivery: float64(v) / n})
	}
	sort.Slice(c.Top, func(i, j int) bool { return c.Top[i].PerDelivery > c.Top[j].PerDelivery })
	if len(c.Top) > 8 {
		c.Top = c.Top[:8]
	}
	for k, v := range d.UsecBy {
		c.TopTime = append(c.TopTime, CmdShare{Cmd: k, PerDelivery: float64(v) / n})
	}
	sort.Slice(c.TopTime, func(i, j int) bool { return c.TopTime[i].PerDelivery > c.TopTime[j].PerDelivery })
	if len(c.TopTime) > 8 {
		c.TopTime = c.TopTime[:8]
	}
	for _, addr := range d.nodeAddrs() {
		m := d.Nodes[addr]
		c.Masters = append(c.Masters, NodeCost{Addr: addr, CommandsPerDelivery: float64(m.total()) / n,
			RoundTripsPerDelivery: float64(m.Reads) / n, CPUUsecPerDelivery: float64(m.CPU) / float64(time.Microsecond) / n})
	}
	return c
}

// SubReport is one subscriber's figures.
type SubReport struct {
	ID          string           `json:"id"`
	Role        string           `json:"role"`
	Behaviour   string           `json:"behaviour"`
	Limit       string           `json:"limit"`
	Rate        float64          `json:"rate_per_s"`
	Burst       int              `json:"burst"`
	MaxInFlight int              `json:"max_in_flight"`
	Capacity    float64          `json:"capacity_per_s"` // the most it can take: limit, in-flight ÷ delay, its own bucket
	Published   int              `json:"published"`
	Delivered   int              `json:"delivered"`
	Dead        int              `json:"dead"`
	DeadReasons map[string]int64 `json:"dead_reasons,omitempty"`
	Lost        int              `json:"lost"`
	Duplicates  int              `json:"duplicates"`
	Requests    int              `json:"requests"`
	SteadyRate  float64          `json:"steady_rate_per_s"`
	// Worst is the worst window of the requests, less those of the stalls
	// in Excuses: each excused a violation it explained (see judgeLimit).
	// StallExcluded counts the requests left out.
	Worst         Window   `json:"worst_window"`
	Excuses       []Excuse `json:"excuses,omitempty"`
	StallExcluded int      `json:"stall_excluded,omitempty"`
	// NotExcusedBy are the stalls that overlapped an exceeded Worst but
	// did not explain it.
	NotExcusedBy []StallRef `json:"not_excused_by,omitempty"`
	// Blurred are the Retry-After deadlines a stall straddled: an early
	// request there could have been stamped late enough to pass.
	Blurred []Blur        `json:"blurred_deadlines,omitempty"`
	Stats   EndpointStats `json:"receiver"`
	// Worker is the worker's outcome counters for the subscriber (see
	// worker.StatsKey) without the histograms: delivered, failed,
	// deferred:<gate>, dead:<reason>, http:<status> per answer and
	// http:error per request that got none (refused or reset). It is the
	// sender's side of what the endpoint did.
	Worker     map[string]int64 `json:"worker_counters,omitempty"`
	Runs       int64            `json:"handler_runs"`
	Latency    Latency          `json:"latency"`
	FirstPub   time.Time        `json:"first_publish,omitzero"`
	DrainS     float64          `json:"drain_s"`     // first publish → last settle
	MinDrainS  float64          `json:"min_drain_s"` // backlog ÷ capacity (plus planned downtime)
	RatePerSec []float64        `json:"rate_series"`
	Backlog    []float64        `json:"backlog_series"`
	// ThrottledPerMin is how many 429s that set a Retry-After deadline
	// (Stats.Throttled) the endpoint answered a minute, from its first
	// request to its last; SettledThrottledPerMin the same from 10 s after
	// the first on, once the effective rate has had the time to learn the
	// endpoint's. Both 0 for an endpoint that never throttles.
	ThrottledPerMin        float64 `json:"throttled_per_min,omitempty"`
	SettledThrottledPerMin float64 `json:"settled_throttled_per_min,omitempty"`
}

// LatencyCompare is a fast subscriber's latency with and without the bad
// subscribers present, from the same run.
type LatencyCompare struct {
	Subscriber string  `json:"subscriber"`
	Alone      Latency `json:"alone"`
	WithBad    Latency `json:"with_bad"`
	RatioP50   float64 `json:"ratio_p50"`
	RatioP99   float64 `json:"ratio_p99"`
}

// collect turns a finished scenario's raw material into per-subscriber
// reports and checks the invariants.
func (e *env) collect(ctx context.Context, r *ScenarioReport, queue string, subs []subSpec, led *Ledger, start, end time.Time) (map[string]*outcome, error) {
	dead, err := archived(ctx, e.rdb, e.queuesOf(ctx, queue))
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	outs := map[string]*outcome{}
	seconds := int(end.Sub(start).Seconds()) + 2
	var lastSettle time.Time
	for _, s := range subs {
		o := buildOutcome(led.For(s.ID), e.recv.Arrivals(s.ID), dead[s.stored()])
		outs[s.ID] = o
		counters, err := worker.ReadStats(ctx, e.rdb, queue, s.stored())
		if err != nil {
			return nil, err
		}
		sr := &SubReport{ID: s.ID, Role: s.Role, Behaviour: s.behaviour(), Limit: s.Limit.String(),
			Rate: float64(s.Limit.Rate) / s.Limit.Period.Seconds(), Burst: s.Limit.Burst, MaxInFlight: s.MaxInFlight,
			Capacity: s.capacity(), Published: len(o.published), Delivered: len(o.delivered), Dead: len(o.dead),
			Lost: o.lost(), Duplicates: o.duplicates, Requests: len(o.requests), Stats: e.recv.Stats(s.ID),
			Latency: latencyOf(o.latencies), Runs: runsOf(counters), DeadReasons: deadReasons(counters), Worker: outcomeCounters(counters)}
		r.judge(sr, o.requests, e.stalls, e.cfg.Slack)
		deadlines := e.recv.Deadlines(s.ID)
		r.judgeEarly(sr, deadlines, o.requests, e.stalls)
		if len(deadlines) > 0 {
			throttled := make([]time.Time, len(deadlines))
			for i, d := range deadlines { // a deadline is its 429's time + Retry-After (an HTTP-date's up to 1s later)
				throttled[i] = d.Add(-s.Endpoint.withDefaults().RetryAfter)
			}
			sr.ThrottledPerMin, sr.SettledThrottledPerMin = throttlesPerMinute(throttled, o.requests, settleAfter)
		}
		for _, m := range idle(s, sr) {
			r.invalid(true, "%s: %s", s.ID, m)
		}
		sr.RatePerSec, sr.Backlog = o.series(start, seconds)
		downUntil := int(s.Endpoint.DownFor.Seconds()) + 1
		sr.SteadyRate = steadyRate(sr.RatePerSec, sr.Backlog, min(sr.Rate, sr.Capacity), downUntil)
		if !o.lastSettle.IsZero() && !o.firstPub.IsZero() {
			// Dead-letter times have whole seconds (asynq's LastFailedAt).
			sr.DrainS = max(0, o.lastSettle.Sub(o.firstPub).Seconds())
		}
		sr.MinDrainS, sr.FirstPub = s.minDrain(sr.Published), o.firstPub
		if o.lastSettle.After(lastSettle) {
			lastSettle = o.lastSettle
		}
		r.Subscribers = append(r.Subscribers, sr)
		r.Published += sr.Published
		r.Delivered += sr.Delivered
		r.Dead += sr.Dead
		r.Lost += sr.Lost
		r.Duplicates += sr.Duplicates
		r.HandlerRuns += sr.Runs
		r.check(sr)
	}
	if r.Delivered > 0 {
		r.RunsPerDelivery = float64(r.HandlerRuns) / float64(r.Delivered)
		if !lastSettle.IsZero() {
			r.DeliveriesPerSec = float64(r.Delivered) / lastSettle.Sub(start).Seconds()
		}
	}
	return outs, nil
}

// judge checks sr's requests (sorted) against its limit. Seed 003:
// classify the run before reading it. A violation that only a proven stall
// explains (judgeLimit) makes the run invalid in a way that could hide a
// broken limiter; any other violation is left in sr.Worst and fails the
// scenario in check.
func (r *ScenarioReport) judge(sr *SubReport, requests []time.Time, stalls []stall, slack time.Duration) {
	v := judgeLimit(requests, sr.Rate, sr.Burst, slack, stalls)
	sr.Worst, sr.Excuses, sr.StallExcluded, sr.NotExcusedBy = v.Worst, v.Excuses, v.Dropped, v.Tried
	for _, x := range v.Excuses {
		r.invalid(true, "%s: %d requests in %.3fs at %s (limit allows %.1f) excused by the stall at %s (timer %.0fms late): without the %d requests the receiver timestamped during it, that window holds %d ≤ %.1f",
			sr.ID, x.Window.Count, x.Window.Span, clock(x.Window.From), x.Window.Allowed, clock(x.Stall.At), x.Stall.LagMs,
			x.Dropped, x.Without.Count, x.Without.Allowed)
	}
}

// judgeEarly records the deadlines at which a stall may have hidden an
// early request (see Blur): "0 early" is unproven there.
func (r *ScenarioReport) judgeEarly(sr *SubReport, deadlines, requests []time.Time, stalls []stall) {
	sr.Blurred = blurredDeadlines(deadlines, requests, stalls)
	for _, b := range sr.Blurred {
		r.invalid(true, "%s: the stall at %s (timer %.0fms late) began before the Retry-After deadline %s and %d requests were stamped after it during the stall: they may have come early unseen",
			sr.ID, clock(b.Stall.At), b.Stall.LagMs, clock(b.Deadline), b.Requests)
	}
}

// check records the invariants sr breaks.
func (r *ScenarioReport) check(sr *SubReport) {
	fail := func(format string, args ...any) {
		r.Failures = append(r.Failures, sr.ID+": "+fmt.Sprintf(format, args...))
	}
	if sr.Lost > 0 {
		fail("%d events lost (neither delivered nor dead)", sr.Lost)
	}
	if sr.Stats.Early > 0 {
		fail("%d requests before a Retry-After deadline", sr.Stats.Early)
	}
	if sr.Stats.Bans > 0 {
		fail("banned %d times", sr.Stats.Bans)
	}
	if w := sr.Worst; w.Exceeded {
		why := "no stall overlaps it"
		if len(sr.NotExcusedBy) > 0 {
			why = fmt.Sprintf("%d overlapping stalls (first at %s, timer %.0fms late) do not explain it", len(sr.NotExcusedBy),
				clock(sr.NotExcusedBy[0].At), sr.NotExcusedBy[0].LagMs)
		}
		fail("limit exceeded: %d requests in %.3fs at %s, limit allows %.1f; %s", w.Count, w.Span, clock(w.From), w.Allowed, why)
	}
	if sr.Stats.BadSig > 0 {
		fail("%d requests with a bad signature", sr.Stats.BadSig)
	}
	if sr.Stats.RelistenErr != "" {
		fail("endpoint could not come back up: %s", sr.Stats.RelistenErr)
	}
}

// invalid records why the run's figures are not to be read. hides marks a
// reason behind which a broken invariant could go unseen; the others
// (a slow generator or receiver) leave every invariant checked on
// complete data, and whether the adversary still pushed hard enough is
// checked on its own.
func (r *ScenarioReport) invalid(hides bool, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.InvalidReasons = append(r.InvalidReasons, msg)
	if hides {
		r.Hiding = append(r.Hiding, msg)
	}
}

// finish sets Passed and Valid from what was recorded.
func (r *ScenarioReport) finish(invalidLagMs float64) {
	if r.ProbeMaxMs > maxStallMs {
		r.invalid(false, "receiver stalled: a timer fired %.0fms late (over %dms)", r.ProbeMaxMs, maxStallMs)
	}
	if r.Generator.Behind() {
		r.invalid(false, "generator behind: %d of %d publishes started over 250ms late (max %s)",
			r.Generator.Late, r.Generator.Planned, r.Generator.MaxLate.Round(time.Millisecond))
	}
	if r.Generator.Failed > 0 {
		// A Publish that failed may have enqueued for some subscribers
		// without returning them, so the ledger cannot see those events lost.
		r.invalid(true, "generator: %d publishes failed; events they may have enqueued are not in the ledger, so their loss would not show", r.Generator.Failed)
	}
	if r.ProbeP99Ms > invalidLagMs {
		r.invalid(false, "receiver behind: timer lag p99 %.0fms > %.0fms", r.ProbeP99Ms, invalidLagMs)
	}
	r.Valid = len(r.InvalidReasons) == 0
	r.Passed = len(r.Failures) == 0
}

// clock is a wall-clock time to the millisecond, to find a window in the
// logs and the charts.
func clock(t time.Time) string { return t.Format("15:04:05.000") }

// maxStallMs is the longest stall of the harness process a valid run may
// have had: in a longer one the receiver fell visibly behind its schedule.
const maxStallMs = 250

// runsOf counts handler runs from the worker's per-subscriber counters:
// every run records exactly one outcome field.
func runsOf(c map[string]int64) int64 {
	var n int64
	for k, v := range c {
		if k == "delivered" || k == "failed" || k == "infra_error" || strings.HasPrefix(k, "deferred:") || strings.HasPrefix(k, "dead:") {
			n += v
		}
	}
	return n
}

// outcomeCounters is c without the latency histograms.
func outcomeCounters(c map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range c {
		switch {
		case k == "delivered", k == "failed", k == "infra_error",
			strings.HasPrefix(k, "deferred:"), strings.HasPrefix(k, "dead:"), strings.HasPrefix(k, "http:"):
			out[k] = v
		}
	}
	return out
}

func deadReasons(c map[string]int64) map[string]int64 {
	var m map[string]int64
	for k, v := range c {
		if r, ok := strings.CutPrefix(k, "dead:"); ok {
			if m == nil {
				m = map[string]int64{}
			}
			m[r] = v
		}
	}
	return m
}

// archived lists the queue's dead letters by subscriber and event id.
func archived(ctx context.Context, rdb redis.UniversalClient, queues []string) (map[string]map[string]deadTask, error) {
	insp := asynq.NewInspectorFromRedisClient(rdb)
	out := map[string]map[string]deadTask{}
	for _, q := range queues {
		if err := archivedIn(ctx, insp, q, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// archivedIn adds queue's archived tasks to out.
func archivedIn(ctx context.Context, insp *asynq.Inspector, queue string, out map[string]map[string]deadTask) error {
	const size = 1000
	for page := 1; page < 1000; page++ {
		ts, err := insp.ListArchivedTasks(queue, asynq.PageSize(size), asynq.Page(page))
		if errors.Is(err, asynq.ErrQueueNotFound) {
			return nil // never used
		}
		if err != nil {
			return err
		}
		for _, t := range ts {
			sub, ev, ok := splitTaskID(t.ID)
			if !ok {
				continue
			}
			if out[sub] == nil {
				out[sub] = map[string]deadTask{}
			}
			out[sub][ev] = deadTask{at: t.LastFailedAt, reason: t.LastErr}
		}
		if len(ts) < size || ctx.Err() != nil {
			break
		}
	}
	return nil
}

// write saves report.json and summary.txt in dir.
func (rep *Report) write(dir string, summary io.Writer) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	var sb strings.Builder
	rep.Summary(&sb)
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(sb.String()), 0o644); err != nil {
		return err
	}
	if summary != nil {
		_, err = io.WriteString(summary, sb.String())
	}
	return err
}
