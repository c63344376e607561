package web_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/worker"
)

// An endpoint that refuses every connection opens its breaker: the status
// answer and /metrics say so, and its events are held, not dead-lettered:
// with max_attempts 2 and probes every 100ms, each of the 10 events is
// probed several times in 3s, so an event whose hold or probe spent an
// attempt would die.
func TestOpenBreakerShowsInStatusAndMetrics(t *testing.T) {
	// A 5s backoff: no event is tried a second time before the breaker
	// opens (5 first attempts fail), so none may die but by a hold or a
	// probe spending its attempt.
	b := setup(t, &worker.Config{BackoffBase: 5 * time.Second, BackoffMax: 5 * time.Second,
		Breaker: limits.BreakerPolicy{Failures: 5, ProbeGap: 100 * time.Millisecond, MaxProbeGap: 100 * time.Millisecond}})
	down, err := deploy.NewRefusingPort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { down.Close() })
	b.call(t, "PUT", "/v1/subscribers/down", map[string]any{"url": "http://" + down.Addr + "/hook", "metrics": true, "max_attempts": 2})
	for i := range 10 {
		if r := b.call(t, "POST", "/v1/events", fmt.Sprintf(`{"id":"e%d","type":"t","data":1}`, i)); r.status != 202 {
			t.Fatalf("publish: %d %s", r.status, r.body)
		}
	}
	var st web.Status
	testkit.Eventually(t, 20*time.Second, "the breaker open", func() bool {
		r := b.call(t, "GET", "/v1/subscribers/down/status", nil)
		st = web.Status{}
		return r.status == 200 && json.Unmarshal(r.body, &st) == nil && st.Breaker.State != "closed"
	})
	if st.Breaker.FailingSince == nil || st.Breaker.OpenedAt == nil || st.Breaker.NextProbe == nil || st.Breaker.LastError == "" {
		t.Fatalf("open breaker %+v; want failing since, opened, next probe and the last error", st.Breaker)
	}
	fams := scrape(t, b)
	if v, _, ok := value(fams, "hooklane_breaker_state", map[string]string{"subscriber": "down"}); !ok || v < 1 {
		t.Errorf("hooklane_breaker_state{subscriber=down} = %v (present %v); want open (1 or 2)", v, ok)
	}
	if v, _, _ := value(fams, "hooklane_breakers_open", nil); v != 1 {
		t.Errorf("hooklane_breakers_open = %v; want 1", v)
	}
	// Past several probes (each one a failure of a held event), still none
	// dead.
	opened := *st.Breaker.OpenedAt
	testkit.Eventually(t, 20*time.Second, "probes for 3s after the breaker opened", func() bool {
		r := b.call(t, "GET", "/v1/subscribers/down/status", nil)
		st = web.Status{}
		return r.status == 200 && json.Unmarshal(r.body, &st) == nil && (st.Counts.Dead > 0 || st.Breaker.LastErrorAt != nil &&
			st.Breaker.LastErrorAt.Sub(opened) > 3*time.Second)
	})
	if st.Counts.Dead != 0 {
		t.Errorf("%d dead letters; want the events held (2 attempts each, the breaker open after 5 failures)", st.Counts.Dead)
	}
}

// An endpoint too slow for its limit is paced at what its in-flight slots
// carry (max_in_flight ÷ its latency): the status answer and /metrics
// show that pace and why, beside the configured limit. The latency is
// what the worker measured, 200ms and more (the request's own overhead,
// and whatever the machine is busy with): the check is the pace that
// latency gives, not a latency this test cannot promise.
func TestSlotBoundPaceShowsInStatusAndMetrics(t *testing.T) {
	b := setup(t, fastRetries)
	slow := testkit.NewSink(t, func(http.ResponseWriter, int) { time.Sleep(200 * time.Millisecond) })
	b.call(t, "PUT", "/v1/subscribers/slow", map[string]any{"url": slow.URL, "metrics": true, "max_in_flight": 2,
		"rate_limit": map[string]any{"rate": 100, "burst": 100, "period": "1s"}})
	const n = 4
	for i := range n {
		if r := b.call(t, "POST", "/v1/events", fmt.Sprintf(`{"id":"e%d","type":"t","data":1}`, i)); r.status != 202 {
			t.Fatalf("publish: %d %s", r.status, r.body)
		}
	}
	// Every event delivered: the latency the pace is read from moves no more.
	var st web.Status
	testkit.Eventually(t, 20*time.Second, "every event delivered, the slots' pace in the status", func() bool {
		r := b.call(t, "GET", "/v1/subscribers/slow/status", nil)
		st = web.Status{}
		return r.status == 200 && json.Unmarshal(r.body, &st) == nil && st.Counts.Delivered == n &&
			strings.Contains(st.EffectiveRate.Reason, "max_in_flight 2")
	})
	m := regexp.MustCompile(`^max_in_flight 2 at the endpoint's (\d+)ms latency$`).FindStringSubmatch(st.EffectiveRate.Reason)
	if m == nil {
		t.Fatalf("effective rate %+v; want the reason to name the slots and the latency", st.EffectiveRate)
	}
	lt, _ := strconv.Atoi(m[1])
	// 2 slots at lt ms, and lt at least the endpoint's 200ms: at most 10/s,
	// far under the limit. The reason rounds lt to the millisecond, the
	// status the rate to a hundredth.
	if r, l := st.EffectiveRate.Rate, float64(lt); lt < 200 || r < 2000/(l+0.5)-0.005 || r > 2000/(l-0.5)+0.005 {
		t.Fatalf("effective rate %+v; want 2 slots ÷ the %dms latency (at least the endpoint's 200ms), not the limit 100/s", st.EffectiveRate, lt)
	}
	fams := scrape(t, b)
	if v, _, ok := value(fams, "hooklane_effective_rate", map[string]string{"subscriber": "slow"}); !ok || math.Abs(v-st.EffectiveRate.Rate) > 0.005 {
		t.Errorf("hooklane_effective_rate{subscriber=slow} = %v (present %v); want the status' %v", v, ok, st.EffectiveRate.Rate)
	}
}
