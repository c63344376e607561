package web

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// metricsHandler serves asynq's queue collector, hooklane's collector and
// the process's own Go metrics from one registry.
func (s *Server) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewQueueMetricsCollector(s.insp),
		&hooklaneCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// hooklaneCollector reads hooklane's state from Redis at scrape time, so
// that any number of worker processes add up without a push gateway and a
// restart loses nothing. A scrape's cost does not depend on the number of
// subscribers: it reads the namespace's totals (worker.ReadTotals), a few
// index cardinalities, the queues, and the counters of the subscribers
// marked for metrics (Subscriber.Metrics), at most
// Config.MetricsMaxSubscribers of them, and of the tenants listed
// (Config.MetricsTenants). It never lists the subscribers or the tenants.
type hooklaneCollector struct{ s *Server }

func (c *hooklaneCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *hooklaneCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	up := 1.0
	if err := c.collect(ctx, ch); err != nil {
		c.s.cfg.Logger.Warn("metrics: reading from Redis", "err", err)
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	// this process' own, not Redis': one series a web process
	ch <- prometheus.MustNewConstMetric(descPublishing, prometheus.GaugeValue, float64(c.s.places.inProgress()))
	ch <- prometheus.MustNewConstMetric(descShed, prometheus.CounterValue, float64(c.s.places.shed.Load()))
}

// KEYS[1]: the cooling set (tasks.Keys.Cooling). Reply: how many cooldowns
// end after now, in Redis' clock.
var coolingNowScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')`)

func (c *hooklaneCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	s := c.s
	keys := tasks.Keys(s.cfg.Namespace)
	limit := int64(max(s.cfg.MetricsMaxSubscribers, 0))
	var totals, counters *redis.MapStringStringCmd
	var marked *redis.StringSliceCmd
	var nMarked, nSubs, nPaused, nOpen *redis.IntCmd
	var nCooling *redis.Cmd
	tenantTotals := make([]*redis.MapStringStringCmd, len(s.cfg.MetricsTenants))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		totals = p.HGetAll(ctx, keys.Totals())
		for i, t := range s.cfg.MetricsTenants {
			tenantTotals[i] = p.HGetAll(ctx, keys.TenantTotals(t))
		}
		counters = p.HGetAll(ctx, keys.Counters())
		nSubs = p.ZCard(ctx, keys.SubscriberIDs())
		nPaused = p.SCard(ctx, keys.PausedIndex())
		nOpen = p.SCard(ctx, keys.OpenBreakers())
		nCooling = coolingNowScript.Eval(ctx, p, []string{keys.Cooling()})
		nMarked = p.ZCard(ctx, keys.MetricsIndex())
		if limit > 0 {
			marked = p.ZRangeByLex(ctx, keys.MetricsIndex(), &redis.ZRangeBy{Min: "-", Max: "+", Count: limit})
		}
		return nil
	})
	if err != nil {
		return err
	}
	emitCounts(ch, aggregateDescs, worker.ParseCounts(totals.Val()))
	for i, t := range s.cfg.MetricsTenants {
		emitCounts(ch, tenantDescs, worker.ParseCounts(tenantTotals[i].Val()), t)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descSubscribers, float64(nSubs.Val()))
	gauge(descPausedCount, float64(nPaused.Val()))
	gauge(descOpenCount, float64(nOpen.Val()))
	cooling, _ := nCooling.Int64()
	gauge(descCoolingCount, float64(cooling))
	gauge(descMarked, float64(nMarked.Val()))
	gauge(descMaxMarked, float64(limit))
	cs := worker.ParseCounts(counters.Val())
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(cs[worker.DroppedDeleted]), "deleted")
	for _, why := range []string{worker.RescuedNoTurn, worker.RescuedLostRun, worker.RescuedLostTask, worker.RescuedStale} {
		ch <- prometheus.MustNewConstMetric(descRescued, prometheus.CounterValue, float64(cs["rescued:"+why]), why)
	}
	for _, typ := range []string{tasks.OperatorFailing, tasks.OperatorRecovered, tasks.OperatorDisabled, tasks.OperatorDead} {
		ch <- prometheus.MustNewConstMetric(descOperator, prometheus.CounterValue, float64(cs["ops:"+typ]), typ)
	}
	if marked != nil {
		if err := c.collectMarked(ctx, ch, marked.Val()); err != nil {
			return err
		}
	}
	return c.collectQueues(ch, keys)
}

// collectMarked emits the series of the marked subscribers ids: four
// commands each, and one for all their configurations, in one pipeline.
func (c *hooklaneCollector) collectMarked(ctx context.Context, ch chan<- prometheus.Metric, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	s := c.s
	keys := tasks.Keys(s.cfg.Namespace)
	stats := make([]*redis.MapStringStringCmd, len(ids))
	inflight := make([]*redis.IntCmd, len(ids))
	cool := make([]*redis.StringCmd, len(ids))
	rec := make([]*redis.MapStringStringCmd, len(ids))
	var configs *redis.SliceCmd
	var timeCmd *redis.TimeCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			k := keys.Gates(id)
			stats[i] = p.HGetAll(ctx, keys.Stats(id))
			inflight[i] = s.gates.InFlightIn(ctx, p, k)
			cool[i] = p.Get(ctx, k.Cooldown)
			rec[i] = p.HGetAll(ctx, k.Record) // a small hash: pause, breaker, adaptive rate
		}
		configs = p.HMGet(ctx, keys.SubscriberConfigs(), ids...)
		timeCmd = p.Time(ctx) // cooldowns are kept in Redis' clock
		return nil
	})
	if err != nil && err != redis.Nil {
		return err
	}
	now := timeCmd.Val()
	for i, id := range ids {
		emitCounts(ch, subscriberDescs, worker.ParseCounts(stats[i].Val()), id)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, id)
		}
		gauge(descInFlight, float64(inflight[i].Val()))
		r := rec[i].Val()
		_, paused := r["paused"]
		gauge(descPaused, b2f(paused))
		gauge(descBreaker, map[string]float64{"closed": 0, "open": 1, "probing": 2}[limits.ReadBreaker(r, now).State])
		var sub tasks.Subscriber
		if v, _ := configs.Val()[i].(string); json.Unmarshal([]byte(v), &sub) == nil && sub.Limit.Rate > 0 {
			gauge(descEffective, limits.ReadEffective(r, sub.Limit, cmp.Or(sub.MaxInFlight, tasks.DefaultMaxInFlight), now).Rate/sub.Limit.Period.Seconds())
		}
		remaining := 0.0
		if until := limits.ParseCooldown(cool[i].Val()); until.After(now) {
			remaining = until.Sub(now).Seconds()
		}
		gauge(descCooldown, remaining)
	}
	return nil
}

// collectQueues emits the depth of the namespace's queues: the cost of a
// scrape grows with the queues (lanes × shards × regions), not with the
// subscribers.
func (c *hooklaneCollector) collectQueues(ch chan<- prometheus.Metric, keys tasks.Keys) error {
	queues, err := c.s.insp.Queues()
	if err != nil {
		return err
	}
	for _, name := range queues {
		if !keys.OwnsQueue(name) {
			continue
		}
		q, err := c.s.insp.GetQueueInfo(name)
		if err != nil {
			continue // gone since it was listed
		}
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, q.Latency.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(descRetryWait, prometheus.GaugeValue, float64(q.Retry), name)
		ch <- prometheus.MustNewConstMetric(descScheduled, prometheus.GaugeValue, float64(q.Scheduled), name)
	}
	return nil
}

// emitCounts emits the counter series of one counters hash (worker.ReadStats'
// fields) with d's names: the namespace's totals without sub, one marked
// subscriber's or listed tenant's with its name.
func emitCounts(ch chan<- prometheus.Metric, d countDescs, st map[string]int64, sub ...string) {
	counter := func(desc *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), append(sub[:len(sub):len(sub)], labels...)...)
	}
	var deferred, dead int64
	for k, v := range st {
		switch name, label, _ := strings.Cut(k, ":"); name {
		case "deferred":
			deferred += v
			counter(d.deferrals, v, label)
		case "dead":
			dead += v
			counter(d.dead, v, label)
		case "http":
			counter(d.responses, v, label)
		}
	}
	counter(d.deliveries, st["delivered"], "delivered")
	counter(d.deliveries, st["failed"], "failed")
	counter(d.deliveries, st["infra_error"], "infra_error")
	counter(d.deliveries, deferred, "deferred")
	counter(d.deliveries, dead, "dead")
	counter(d.throttled, st["http:429"])
	ch <- histogram(d.latency, st, "e2e", sub...)
	ch <- histogram(d.lateness, st, "late", sub...)
}

// histogram turns worker's per-bucket counts (not cumulative) into a
// Prometheus histogram with worker.LatencyBuckets as upper bounds.
func histogram(d *prometheus.Desc, st map[string]int64, h string, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(worker.LatencyBuckets))
	var cum uint64
	for _, le := range worker.LatencyBuckets {
		cum += uint64(max(st[h+":"+strconv.FormatFloat(le, 'g', -1, 64)], 0))
		buckets[le] = cum
	}
	count := cum + uint64(max(st[h+":+Inf"], 0))
	sum := float64(st[h+"_sum_ms"]) / 1000
	return prometheus.MustNewConstHistogram(d, count, sum, buckets, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
