package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// putMany creates n subscribers of event type typ, ids prefix-0000 on,
// through the producer, 16 at a time.
func putMany(t *testing.T, p *producer.Producer, prefix, typ string, n int) {
	t.Helper()
	ids := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range 16 {
		wg.Go(func() {
			for i := range ids {
				s := tasks.Subscriber{ID: fmt.Sprintf("%s-%04d", prefix, i), URL: "https://idle.test/h", EventTypes: []string{typ}}
				if _, err := p.PutSubscriber(context.Background(), s); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// labelValues are the values of label name over every hooklane_ series.
func labelValues(fams map[string]*dto.MetricFamily, name string) map[string]bool {
	out := map[string]bool{}
	for fname, f := range fams {
		if !strings.HasPrefix(fname, "hooklane_") {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == name {
					out[l.GetValue()] = true
				}
			}
		}
	}
	return out
}

// With 2,000 subscribers, two marked for metrics, /metrics has series of
// their own for those two only, and the aggregate series count the
// deliveries of every subscriber: marked or not, summed, equal to the
// per-subscriber counters the API shows.
func TestMetricsBoundedWithManySubscribers(t *testing.T) {
	b := setup(t, fastRetries)
	ok := testkit.NewSink(t, nil)
	slow := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	putMany(t, b.p, "idle", "never", 2000)
	live := []string{"m-a", "m-b", "u-1", "u-2", "u-3"} // m-: marked
	for _, id := range live {
		body := map[string]any{"url": ok.URL, "event_types": []string{"x"}, "metrics": strings.HasPrefix(id, "m-")}
		if r := b.call(t, "PUT", "/v1/subscribers/"+id, body); r.status != 201 {
			t.Fatalf("PUT %s: %d %s", id, r.status, r.body)
		}
	}
	b.call(t, "PUT", "/v1/subscribers/slow", map[string]any{"url": slow.URL, "event_types": []string{"y"}})
	if r := b.call(t, "POST", "/v1/subscribers/idle-0007/pause", nil); r.status != 200 {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	for i := range 3 {
		if r := b.call(t, "POST", "/v1/events", fmt.Sprintf(`{"id":"e%d","type":"x","data":1}`, i)); r.status != 202 {
			t.Fatalf("publish: %d %s", r.status, r.body)
		}
	}
	b.call(t, "POST", "/v1/events", `{"id":"s1","type":"y","data":1}`)

	const want = 15 // 3 events × 5 live subscribers
	var fams map[string]*dto.MetricFamily
	// The namespace totals are flushed once a second, each worker's
	// counters as they stand: slow's cooldown (its record) can show before
	// its 429 reaches the totals. Wait for both; the exact counts are
	// checked below.
	testkit.Eventually(t, 30*time.Second, "15 deliveries in the aggregate series, slow cooling down and its 429 counted", func() bool {
		fams = scrape(t, b)
		d, _, _ := value(fams, "hooklane_deliveries_total", map[string]string{"outcome": "delivered"})
		c, _, _ := value(fams, "hooklane_subscribers_cooling", nil)
		r, _, _ := value(fams, "hooklane_responses_total", map[string]string{"code": "429"})
		th, _, _ := value(fams, "hooklane_throttled_total", nil)
		return d == want && c == 1 && r >= 1 && th >= 1
	})
	if got := labelValues(fams, "subscriber"); len(got) != 2 || !got["m-a"] || !got["m-b"] {
		t.Fatalf("series with a subscriber label for %v; want m-a and m-b only", got)
	}
	// The aggregates are the sum of every subscriber's counters (the API's).
	var delivered int64
	for _, id := range live {
		r := b.call(t, "GET", "/v1/subscribers/"+id+"/status", nil)
		var st web.Status
		if r.status != 200 || json.Unmarshal(r.body, &st) != nil {
			t.Fatalf("status %s: %d %s", id, r.status, r.body)
		}
		delivered += st.Counts.Delivered
	}
	if delivered != want {
		t.Fatalf("the API counts %d deliveries, want %d", delivered, want)
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"hooklane_subscriber_deliveries_total", map[string]string{"subscriber": "m-a", "outcome": "delivered"}, 3},
		{"hooklane_subscriber_deliveries_total", map[string]string{"subscriber": "m-b", "outcome": "delivered"}, 3},
		{"hooklane_responses_total", map[string]string{"code": "200"}, want},
		{"hooklane_responses_total", map[string]string{"code": "429"}, 1},
		{"hooklane_throttled_total", nil, 1},
		{"hooklane_delivery_latency_seconds", nil, want},
		{"hooklane_delivery_lateness_seconds", nil, want},
		{"hooklane_subscribers", nil, 2006},
		{"hooklane_subscribers_paused", nil, 1},
		{"hooklane_metrics_marked_subscribers", nil, 2},
	}
	for _, c := range checks {
		if v, _, ok := value(fams, c.name, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
}

// A scrape runs the same Redis commands, as MONITOR shows them (those in
// Lua included), with 10 subscribers or 1,010, and none names a subscriber
// that is not marked: its cost does not depend on the number of
// subscribers.
func TestMetricsScrapeCostIndependentOfSubscribers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, hs, p := monitoredWeb(t, "cost")
	for _, id := range []string{"mark-a", "mark-b"} {
		if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: id, URL: "https://a.test/h", EventTypes: []string{"x"}, Metrics: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Some tasks, so that the queues exist and are read.
	if _, err := p.Publish(ctx, tasks.Event{ID: "e1", Type: "x", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	var lines []string // the last scrape's
	scrapeCommands := func() []string {
		var out []string
		lines = testkit.Monitor(t, srv.Addr, func() {
			req, _ := http.NewRequest("GET", hs.URL+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := hs.Client().Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("/metrics: %v %v", resp, err)
			}
			resp.Body.Close()
		})
		for _, l := range lines {
			if strings.Contains(l, "other-") {
				t.Errorf("the scrape named a subscriber that is not marked: %s", l)
			}
			// The command's name, without MONITOR's timestamp and client
			// and without the arguments (times, dates); a new pooled
			// connection's handshake is not the scrape's work.
			_, cmd, _ := strings.Cut(l, "] ")
			name, _, _ := strings.Cut(strings.ToLower(cmd), " ")
			if name != `"hello"` && name != `"client"` {
				out = append(out, name)
			}
		}
		slices.Sort(out) // the registry runs its collectors concurrently
		return out
	}
	// Redis' reply bytes for one scrape (without MONITOR, which sends
	// every command to its own client): one command can read every
	// subscriber too.
	info := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { info.Close() })
	sent := func() int64 { return testkit.InfoInt(t, info, "stats", "total_net_output_bytes") }
	replyBytes := func() int64 {
		before := sent()
		req, _ := http.NewRequest("GET", hs.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hs.Client().Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("/metrics: %v %v", resp, err)
		}
		resp.Body.Close()
		return sent() - before
	}
	putMany(t, p, "other", "y", 8)
	scrapeCommands() // scripts loaded, connections opened
	few, fewBytes := scrapeCommands(), replyBytes()
	putMany(t, p, "other", "y", 1008) // 1,000 more (8 rewritten)
	many, manyBytes := scrapeCommands(), replyBytes()
	if !slices.Equal(few, many) {
		t.Fatalf("a scrape ran %d commands with 10 subscribers and %d with 1,010\nwith 10: %q\nwith 1,010: %q", len(few), len(many), few, many)
	}
	// 1,000 ids alone would be ~17 KB of replies.
	if manyBytes-fewBytes > 2048 {
		t.Fatalf("a scrape read %d bytes from Redis with 10 subscribers and %d with 1,010", fewBytes, manyBytes)
	}
	var marked int
	for _, l := range lines {
		if strings.Contains(l, "mark-a") || strings.Contains(l, "mark-b") {
			marked++
		}
	}
	if marked == 0 {
		t.Fatalf("no command of the scrape read a marked subscriber: %q", many)
	}
	t.Logf("a scrape: %d commands, %d of them about the 2 marked subscribers, %d and %d reply bytes: %q", len(many), marked, fewBytes, manyBytes, many)
}

// HOOKLANE_METRICS_MAX_SUBSCRIBERS caps the marked subscribers that get
// series of their own: the first ones by id; the gauge tells how many are
// marked, so a cut is visible.
func TestMetricsMaxSubscribers(t *testing.T) {
	b := setup(t, nil)
	s, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL},
		Namespace: b.ns, Logger: quiet, MetricsMaxSubscribers: 2})
	if err != nil {
		t.Fatal(err)
	}
	capped := &bundle{ns: b.ns, srv: httptest.NewServer(s.Handler()), rdb: b.rdb, p: b.p, insp: b.insp}
	t.Cleanup(func() { capped.srv.Close(); s.Close() })
	for _, id := range []string{"e", "d", "c", "b", "a"} {
		b.call(t, "PUT", "/v1/subscribers/"+id, map[string]any{"url": "https://a.test/h", "metrics": true})
	}
	b.call(t, "PUT", "/v1/subscribers/0-unmarked", map[string]any{"url": "https://a.test/h"})
	fams := scrape(t, capped)
	if got := labelValues(fams, "subscriber"); len(got) != 2 || !got["a"] || !got["b"] {
		t.Fatalf("series for %v; want the first 2 marked by id (a, b)", got)
	}
	if v, _, _ := value(fams, "hooklane_metrics_marked_subscribers", nil); v != 5 {
		t.Fatalf("hooklane_metrics_marked_subscribers = %v, want 5", v)
	}
	if v, _, _ := value(fams, "hooklane_metrics_max_subscribers", nil); v != 2 {
		t.Fatalf("hooklane_metrics_max_subscribers = %v, want 2", v)
	}
	// The default server exports all five.
	if got := labelValues(scrape(t, b), "subscriber"); len(got) != 5 {
		t.Fatalf("series for %v with the default cap (100); want the 5 marked", got)
	}
}

func TestFromEnvReadsTheMetricsCap(t *testing.T) {
	for v, want := range map[string]int{"": 100, "7": 7, "0": -1, "1000": 1000} {
		t.Setenv("HOOKLANE_METRICS_MAX_SUBSCRIBERS", v)
		c, err := web.FromEnv()
		if c = c.WithDefaults(); err != nil || c.MetricsMaxSubscribers != want {
			t.Errorf("HOOKLANE_METRICS_MAX_SUBSCRIBERS=%q: %d, %v; want %d", v, c.MetricsMaxSubscribers, err, want)
		}
	}
	for _, bad := range []string{"-1", "1001", "lots"} {
		t.Setenv("HOOKLANE_METRICS_MAX_SUBSCRIBERS", bad)
		if _, err := web.FromEnv(); err == nil || !strings.Contains(err.Error(), "HOOKLANE_METRICS_MAX_SUBSCRIBERS") {
			t.Errorf("HOOKLANE_METRICS_MAX_SUBSCRIBERS=%s: %v; want an error naming it", bad, err)
		}
	}
}

// monitoredWeb starts a redis-server of the test's own (MONITOR sees every
// client, so the commands counted are the test's alone), a web process on
// it and a producer, in a fresh namespace named after name.
func monitoredWeb(t *testing.T, name string) (*deploy.Redis, *httptest.Server, *producer.Producer) {
	t.Helper()
	srv, err := deploy.StartRedis(context.Background(), deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ns := testkit.Namespace(name)
	s, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, RedisConfig: deploy.RedisConfig{URL: srv.URL}, Namespace: ns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); s.Close() })
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: srv.URL}, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return srv, hs, p
}
