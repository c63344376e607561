package worker_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// bucket is a receiver's own token bucket: it answers 429 with
// Retry-After: 1 when dry, and can send RateLimit headers.
type bucket struct {
	mu       sync.Mutex
	rate     float64
	burst    float64
	tokens   float64
	at       time.Time
	throttle []time.Time
	policy   string // RateLimit-Policy sent with every answer, if set
}

// window is a receiver with a fixed-window quota that tells, in the
// RateLimit header only, how much is left and when the window resets; it
// answers 429 past the quota.
type window struct {
	mu        sync.Mutex
	quota     int
	length    time.Duration
	start     time.Time
	used      int
	throttled int
}

func (w *window) respond(rw http.ResponseWriter, _ int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.start) >= w.length {
		w.start, w.used = now, 0
	}
	reset := int(math.Ceil(w.start.Add(w.length).Sub(now).Seconds()))
	if w.used >= w.quota {
		w.throttled++
		rw.Header().Set("Retry-After", strconv.Itoa(reset))
		rw.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.used++
	// No RateLimit-Policy: its cap alone would keep hooklane under the
	// quota, and the spent quota's cooldown would go untested.
	rw.Header().Set("RateLimit", fmt.Sprintf(`"w";r=%d;t=%d`, w.quota-w.used, reset))
}

func newBucket(rate, burst float64) *bucket {
	return &bucket{rate: rate, burst: burst, tokens: burst, at: time.Now()}
}

func (b *bucket) respond(w http.ResponseWriter, _ int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
	if b.policy != "" {
		w.Header().Set("RateLimit-Policy", b.policy)
	}
	if b.tokens < 1 {
		b.throttle = append(b.throttle, now)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	b.tokens--
}

func (b *bucket) throttled() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.throttle...)
}

// TestAdaptiveRateConvergesUnderAReceiversLimit: configured 40/s, the
// receiver takes 37/s. Each 429 lowers the effective rate by 5%: 38/s,
// then 36.1/s, under the receiver's; then the 429s stop, and status says
// why the rate is lower. The receiver's rate is off the decrease's steps
// on purpose: at 34/s (40 × 0.95³ = 34.3/s, 1% over) the third step's
// slow overdraw drew a fourth 429 anywhere from 10 to 20 s later, which is
// AIMD working, and made "they stop" a race with the end of the run.
func TestAdaptiveRateConvergesUnderAReceiversLimit(t *testing.T) {
	// Not parallel: arrival rates.
	const n, receiver = 500, 37.0
	b := procBundle(t) // a real worker process
	rc := newBucket(receiver, 3)
	s := testkit.NewSink(t, rc.respond)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.Limit{Rate: 40, Burst: 3, Period: time.Second}, MaxAttempts: 20})
	start := time.Now()
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	testkit.Eventually(t, 90*time.Second, "all delivered", func() bool { return b.counter(t, "s", "delivered") == n })
	end := time.Now()
	th := rc.throttled()
	late := 0
	for _, at := range th {
		if at.After(start.Add(end.Sub(start) * 6 / 10)) {
			late++
		}
	}
	t.Logf("%d events in %.1fs (%.1f/s against the receiver's %g/s), %d 429s, %d in the last 40%% of the run",
		n, end.Sub(start).Seconds(), float64(n)/end.Sub(start).Seconds(), receiver, len(th), late)
	if len(th) > 8 || late > 0 {
		t.Errorf("%d 429s, %d in the last 40%% of the run; want them to stop after a few", len(th), late)
	}
	rec, err := b.rdb.HGetAll(context.Background(), tasks.Keys(b.ns).Gate("s")).Result()
	if err != nil {
		t.Fatal(err)
	}
	eff := limits.ReadEffective(rec, limits.Limit{Rate: 40, Burst: 3, Period: time.Second}, 0, time.Now())
	if eff.Rate > receiver || eff.Reason == "" {
		t.Errorf("effective rate %.2f/s (%q); want at most the receiver's %g/s, with the reason", eff.Rate, eff.Reason, receiver)
	}
}

// rateLimitPolicyCapsTheRate: a receiver that announces 10/s in
// RateLimit-Policy is sent at 10/s though configured for 20/s, and never
// has to answer 429.
func rateLimitPolicyCapsTheRate(t *testing.T) {
	const n = 60
	b := setup(t, worker.Config{})
	rc := newBucket(10, 2)
	rc.policy = `"default";q=10;w=1`
	s := testkit.NewSink(t, rc.respond)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.Limit{Rate: 20, Burst: 2, Period: time.Second}})
	b.publish(t, "first", "t") // teaches the policy
	testkit.Eventually(t, 10*time.Second, "the first delivery", func() bool { return s.Count() == 1 })
	testkit.Eventually(t, 5*time.Second, "the policy recorded", func() bool {
		v, _ := b.rdb.HGet(context.Background(), tasks.Keys(b.ns).Gate("s"), "a_cap").Result()
		c, _ := strconv.ParseFloat(v, 64)
		return c == 9.5 // 95% of what it announced
	})
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	testkit.Eventually(t, 30*time.Second, "all delivered", func() bool { return s.Count() >= n+1 })
	if th := rc.throttled(); len(th) != 0 {
		t.Errorf("%d 429s; want none: the policy said 10/s", len(th))
	}
	withinLimit(t, s.Got()[1:], 10, 2, 50*time.Millisecond)
}

// TestSpentQuotaWaitsForTheReset: a receiver with a fixed window of 10
// requests per 2s says when its quota is spent and when it comes back;
// configured for 50/s, hooklane waits for the reset instead of drawing the
// 429.
func TestSpentQuotaWaitsForTheReset(t *testing.T) {
	t.Parallel()
	const n = 40
	b := setup(t, worker.Config{})
	rc := &window{quota: 10, length: 2 * time.Second}
	s := testkit.NewSink(t, rc.respond)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.Limit{Rate: 50, Burst: 10, Period: time.Second}, MaxInFlight: 1})
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	testkit.Eventually(t, 30*time.Second, "all delivered", func() bool { return b.counter(t, "s", "delivered") == n })
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.throttled > 1 {
		t.Errorf("%d 429s; want at most the first window's (before any header was read)", rc.throttled)
	}
}

// A receiver whose RateLimit-Policy allows one request a day (under
// 0.0005/s, which rounded to the thousandth was 0: "no cap") caps the rate
// all the same: an event waits for the next day's slot.
func TestTinyRateLimitPolicyStillCaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.Header().Set("RateLimit-Policy", `"day";q=1;w=86400`) })
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.Limit{Rate: 20, Burst: 2, Period: time.Second}})
	b.publish(t, "first", "t") // teaches the policy
	testkit.Eventually(t, 10*time.Second, "the first delivery", func() bool { return s.Count() == 1 })
	want := 0.95 / 86400
	var c float64
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("the policy's cap of %.3g/s recorded", want), func() bool {
		v, _ := b.rdb.HGet(ctx, tasks.Keys(b.ns).Gate("s"), "a_cap").Result()
		c, _ = strconv.ParseFloat(v, 64)
		return math.Abs(c-want) < want/100
	})
	// The limiter's state from before the cap lets one more go at once
	// (its burst of one); the next waits, its subscriber's next turn
	// hours ahead.
	b.publish(t, "second", "t")
	b.publish(t, "third", "t")
	testkit.Eventually(t, 5*time.Second, "the subscriber's next turn hours ahead, an event parked", func() bool {
		at, err := b.rdb.ZScore(ctx, tasks.Keys(b.ns).Ready(""), "s").Result()
		parked, _ := b.rdb.ZCard(ctx, tasks.Keys(b.ns).Gates("s").Lot).Result()
		return err == nil && parked == 1 && time.UnixMilli(int64(at)).After(time.Now().Add(time.Hour))
	})
	if n := s.Count(); n > 2 {
		t.Fatalf("%d requests; want 2 at most", n)
	}
}
