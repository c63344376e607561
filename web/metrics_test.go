package web_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape returns /metrics parsed by family name.
func scrape(t *testing.T, b *bundle) map[string]*dto.MetricFamily {
	t.Helper()
	r := b.call(t, "GET", "/metrics", nil)
	if r.status != 200 {
		t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), "whsec_") {
		t.Fatal("/metrics shows a signing secret")
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value finds the sample of family name whose labels include want; ok is
// false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, *dto.Metric, bool) {
	f := fams[name]
	if f == nil {
		return 0, nil, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), m, true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), m, true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), m, true
		}
	}
	return 0, nil, false
}

func TestMetricsAfterDeliveries(t *testing.T) {
	b := setup(t, fastRetries)
	fast := testkit.NewSink(t, nil)
	var throttled atomic.Int64
	angry := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			throttled.Add(1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	down := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusBadGateway) })
	// Marked for series of their own (metrics: true); every subscriber
	// counts in the aggregate series.
	b.call(t, "PUT", "/v1/subscribers/fast", map[string]any{"url": fast.URL, "event_types": []string{"a"}, "metrics": true})
	b.call(t, "PUT", "/v1/subscribers/angry", map[string]any{"url": angry.URL, "event_types": []string{"b"}, "metrics": true})
	b.call(t, "PUT", "/v1/subscribers/down", map[string]any{"url": down.URL, "event_types": []string{"c"}, "max_attempts": 1, "metrics": true})
	for _, ev := range []string{`{"id":"1","type":"a","data":1}`, `{"id":"2","type":"a","data":1}`,
		`{"id":"3","type":"b","data":1}`, `{"id":"4","type":"c","data":1}`} {
		if r := b.call(t, "POST", "/v1/events", ev); r.status != 202 {
			t.Fatalf("publish: %d %s", r.status, r.body)
		}
	}
	nb := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	b.call(t, "POST", "/v1/events", `{"id":"5","type":"a","data":1,"not_before":"`+nb+`"}`)

	testkit.Eventually(t, 20*time.Second, "every outcome counted", func() bool {
		fams := scrape(t, b)
		d, _, _ := value(fams, "hooklane_subscriber_deliveries_total", map[string]string{"subscriber": "fast", "outcome": "delivered"})
		a, _, _ := value(fams, "hooklane_subscriber_deliveries_total", map[string]string{"subscriber": "angry", "outcome": "delivered"})
		x, _, _ := value(fams, "hooklane_subscriber_dead_letters_total", map[string]string{"subscriber": "down", "reason": "attempts"})
		all, _, _ := value(fams, "hooklane_deliveries_total", map[string]string{"outcome": "delivered"})
		allDead, _, _ := value(fams, "hooklane_dead_letters_total", map[string]string{"reason": "attempts"})
		return d == 3 && a == 1 && x == 1 && all == 4 && allDead == 1
	})
	fams := scrape(t, b)
	keys := tasks.Keys(b.ns)
	fastQ, downQ := keys.DeliveryQueue("", "fast", tasks.LaneFresh, 1), keys.DeliveryQueue("", "down", tasks.LaneFresh, 1)
	checks := []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"hooklane_redis_up", nil, 1},
		{"hooklane_subscriber_throttled_total", map[string]string{"subscriber": "angry"}, 1},
		{"hooklane_subscriber_responses_total", map[string]string{"subscriber": "angry", "code": "429"}, 1},
		{"hooklane_subscriber_responses_total", map[string]string{"subscriber": "down", "code": "502"}, 1},
		{"hooklane_subscriber_deferrals_total", map[string]string{"subscriber": "angry", "gate": "retry_after"}, 1},
		{"hooklane_subscriber_deliveries_total", map[string]string{"subscriber": "angry", "outcome": "deferred"}, 1},
		{"hooklane_subscriber_deliveries_total", map[string]string{"subscriber": "down", "outcome": "dead"}, 1},
		{"hooklane_subscriber_dead_letters_total", map[string]string{"subscriber": "down", "reason": "attempts"}, 1},
		{"hooklane_subscriber_delivery_latency_seconds", map[string]string{"subscriber": "fast"}, 3},
		{"hooklane_subscriber_delivery_lateness_seconds", map[string]string{"subscriber": "fast"}, 3},
		{"hooklane_throttled_total", nil, 1},
		{"hooklane_responses_total", map[string]string{"code": "429"}, 1},
		{"hooklane_responses_total", map[string]string{"code": "502"}, 1},
		{"hooklane_deferrals_total", map[string]string{"gate": "retry_after"}, 1},
		{"hooklane_delivery_latency_seconds", nil, 4},
		{"hooklane_delivery_lateness_seconds", nil, 4},
		{"hooklane_subscribers", nil, 3},
		{"hooklane_metrics_marked_subscribers", nil, 3},
		{"hooklane_metrics_max_subscribers", nil, 100},
		{"hooklane_in_flight", map[string]string{"subscriber": "fast"}, 0},
		{"hooklane_subscriber_paused", map[string]string{"subscriber": "fast"}, 0},
		{"hooklane_cooldown_remaining_seconds", map[string]string{"subscriber": "angry"}, 0},
		{"hooklane_oldest_eligible_task_age_seconds", map[string]string{"queue": fastQ}, 0},
		{"hooklane_retry_wait_tasks", map[string]string{"queue": fastQ}, 0},
		{"hooklane_scheduled_tasks", map[string]string{"queue": fastQ}, 0},
		{"hooklane_dropped_total", map[string]string{"reason": "deleted"}, 0},
		{"asynq_queue_size", map[string]string{"queue": fastQ}, 0},
		{"asynq_tasks_enqueued_total", map[string]string{"queue": downQ, "state": "archived"}, 1},
		{"asynq_queue_latency_seconds", map[string]string{"queue": fastQ}, 0},
	}
	for _, c := range checks {
		v, _, ok := value(fams, c.name, c.labels)
		if !ok || v < c.min {
			t.Errorf("%s%v = %v (present %v), want at least %v", c.name, c.labels, v, ok, c.min)
		}
	}
	// The histogram's buckets are cumulative and end with all samples.
	_, m, _ := value(fams, "hooklane_subscriber_delivery_latency_seconds", map[string]string{"subscriber": "fast"})
	h := m.GetHistogram()
	var prev uint64
	for _, bk := range h.Bucket {
		if bk.GetCumulativeCount() < prev {
			t.Fatalf("buckets not cumulative: %v", h.Bucket)
		}
		prev = bk.GetCumulativeCount()
	}
	if len(h.Bucket) < 10 || prev > h.GetSampleCount() || h.GetSampleSum() <= 0 {
		t.Fatalf("latency histogram %v", h)
	}
	// The event with a not-before second was late by under a second and a bit.
	_, m, _ = value(fams, "hooklane_subscriber_delivery_lateness_seconds", map[string]string{"subscriber": "fast"})
	if s := m.GetHistogram().GetSampleSum(); s > 10 {
		t.Fatalf("lateness sum %vs for 3 deliveries", s)
	}
}
