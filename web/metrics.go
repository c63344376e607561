package web

import (
	"context"
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

// metricsHandler serves asynq's queue collector, hooklane's per-subscriber
// collector and the process's own Go metrics from one registry.
func (s *Server) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewQueueMetricsCollector(s.insp),
		&subscriberCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("hooklane_"+name, help, labels, nil)
}

var (
	descUp         = desc("redis_up", "1 when the last scrape could read hooklane's state from Redis.")
	descDeliveries = desc("deliveries_total", "Delivery task runs by outcome: delivered (2xx), failed (counted, will retry), deferred (not yet; no attempt spent), dead, infra_error (Redis trouble in a gate).", "subscriber", "outcome")
	descResponses  = desc("responses_total", `Answers received from the endpoint by HTTP status; code "error" when the request got none (connect error, timeout).`, "subscriber", "code")
	descThrottled  = desc("throttled_total", "429 Too Many Requests answers received from the endpoint.", "subscriber")
	descDeferrals  = desc("deferrals_total", "Tasks rescheduled without spending an attempt, by the gate that deferred them.", "subscriber", "gate")
	descDead       = desc("dead_letters_total", "Deliveries given up, by reason: attempts, horizon, gone, deleted, undecodable.", "subscriber", "reason")
	descLatency    = desc("delivery_latency_seconds", "Publish to delivered (2xx received).", "subscriber")
	descLateness   = desc("delivery_lateness_seconds", "Due (the later of publish and not-before) to delivered: how late a scheduled event arrived.", "subscriber")
	descInFlight   = desc("in_flight", "Requests to the endpoint in flight now.", "subscriber")
	descPaused     = desc("subscriber_paused", "1 when the subscriber is paused.", "subscriber")
	descCooldown   = desc("cooldown_remaining_seconds", "Time until the destination's Retry-After cooldown ends; 0 when none.", "subscriber")
	descOldest     = desc("oldest_eligible_task_age_seconds", "Age of the oldest task that is due and waiting for a worker (asynq queue latency).", "queue")
	descRetryWait  = desc("retry_wait_tasks", "Tasks waiting in asynq's retry state: counted failures in backoff and deferrals waiting for a deadline.", "queue")
	descScheduled  = desc("scheduled_tasks", "Tasks waiting for a not-before time or a pacing slot.", "queue")
	descDropped    = desc("dropped_total", "Tasks dropped unsent, by reason: deleted (their subscriber was deleted or re-created since).", "reason")
)

// subscriberCollector reads each subscriber's counters (see worker.StatsKey)
// from Redis at scrape time, so that any number of worker processes add up
// without a push gateway and a restart loses nothing.
type subscriberCollector struct{ s *Server }

func (c *subscriberCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descDeliveries, descResponses, descThrottled, descDeferrals, descDead,
		descLatency, descLateness, descInFlight, descPaused, descCooldown, descOldest, descRetryWait, descScheduled, descDropped} {
		ch <- d
	}
}

func (c *subscriberCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	up := 1.0
	if err := c.collect(ctx, ch); err != nil {
		c.s.cfg.Logger.Warn("metrics: reading from Redis", "err", err)
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
}

func (c *subscriberCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	s := c.s
	subs, err := s.p.ListSubscribers(ctx)
	if err != nil {
		return err
	}
	stats := make([]*redis.MapStringStringCmd, len(subs))
	inflight := make([]*redis.IntCmd, len(subs))
	cool := make([]*redis.StringCmd, len(subs))
	var timeCmd *redis.TimeCmd
	keys := tasks.Keys(s.cfg.Namespace)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sub := range subs {
			k := keys.Gates(sub.ID)
			stats[i] = p.HGetAll(ctx, keys.Stats(sub.ID))
			inflight[i] = s.gates.InFlightIn(ctx, p, k)
			cool[i] = p.Get(ctx, k.Cooldown)
		}
		timeCmd = p.Time(ctx) // cooldowns are kept in Redis' clock
		return nil
	})
	if err != nil && err != redis.Nil {
		return err
	}
	now := timeCmd.Val()
	for i, sub := range subs {
		id := sub.ID
		st := worker.ParseCounts(stats[i].Val())
		counter := func(d *prometheus.Desc, v int64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{id}, labels...)...)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, id)
		}
		var deferred, dead int64
		for k, v := range st {
			switch name, label, _ := strings.Cut(k, ":"); name {
			case "deferred":
				deferred += v
				counter(descDeferrals, v, label)
			case "dead":
				dead += v
				counter(descDead, v, label)
			case "http":
				counter(descResponses, v, label)
			}
		}
		counter(descDeliveries, st["delivered"], "delivered")
		counter(descDeliveries, st["failed"], "failed")
		counter(descDeliveries, st["infra_error"], "infra_error")
		counter(descDeliveries, deferred, "deferred")
		counter(descDeliveries, dead, "dead")
		counter(descThrottled, st["http:429"])
		ch <- histogram(descLatency, st, "e2e", id)
		ch <- histogram(descLateness, st, "late", id)
		gauge(descInFlight, float64(inflight[i].Val()))
		gauge(descPaused, b2f(sub.Paused))
		remaining := 0.0
		if until := limits.ParseCooldown(cool[i].Val()); until.After(now) {
			remaining = until.Sub(now).Seconds()
		}
		gauge(descCooldown, remaining)
	}
	queues, err := s.insp.Queues()
	if err != nil {
		return err
	}
	for _, name := range queues {
		if !keys.OwnsQueue(name) {
			continue
		}
		q, err := s.insp.GetQueueInfo(name)
		if err != nil {
			continue // gone since it was listed
		}
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, q.Latency.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(descRetryWait, prometheus.GaugeValue, float64(q.Retry), name)
		ch <- prometheus.MustNewConstMetric(descScheduled, prometheus.GaugeValue, float64(q.Scheduled), name)
	}
	counters, err := worker.ReadCounters(ctx, s.rdb, s.cfg.Namespace)
	if err != nil {
		return err
	}
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(counters[worker.DroppedDeleted]), "deleted")
	return nil
}

// histogram turns worker's per-bucket counts (not cumulative) into a
// Prometheus histogram with worker.LatencyBuckets as upper bounds.
func histogram(d *prometheus.Desc, st map[string]int64, h, sub string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(worker.LatencyBuckets))
	var cum uint64
	for _, le := range worker.LatencyBuckets {
		cum += uint64(max(st[h+":"+strconv.FormatFloat(le, 'g', -1, 64)], 0))
		buckets[le] = cum
	}
	count := cum + uint64(max(st[h+":+Inf"], 0))
	sum := float64(st[h+"_sum_ms"]) / 1000
	return prometheus.MustNewConstHistogram(d, count, sum, buckets, sub)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
