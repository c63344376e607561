package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// One and four hooklane worker processes deliver to one subscriber on one
// Redis, and four on a 3-master Redis Cluster: its rate limit and in-flight
// cap (reached: the answers after the 429 are slow) hold for all of them
// together (R/s within 3%, never N×R, no window over burst + rate·t) with
// several taking part, and a 429's Retry-After holds for every process: no
// request arrives before its deadline but the ones already on their way.
func TestLimitsHoldAcrossWorkerProcesses(t *testing.T) {
	testkit.Heavy(t, "a Redis Cluster and worker processes")
	// Not parallel: a timing check, run alone.
	c := sharedCluster(t)
	topologies := []struct {
		name  string
		cfg   deploy.RedisConfig
		procs []int
	}{
		// One process is TestRateLimitHolds' case: across processes, 4.
		{"one-redis", deploy.RedisConfig{URL: redisURL()}, []int{4}},
		{"cluster", deploy.RedisConfig{ClusterAddrs: c.Addrs}, []int{4}},
	}
	for _, top := range topologies {
		for _, n := range top.procs {
			t.Run(fmt.Sprintf("%s/%d-procs", top.name, n), func(t *testing.T) { limitsAcross(t, top.cfg, n) })
		}
	}
}

func limitsAcross(t *testing.T, cfg deploy.RedisConfig, procs int) {
	const n, rate, burst, maxInFlight = 100, 20, 5, 3
	const throttleAt = 80          // the request answered 429
	const retryAfter = time.Second // its Retry-After (1 s: the header's resolution)
	var inFlight, most atomic.Int64
	var mu sync.Mutex
	var seen int
	var deadline time.Time // the 429's, on the receiver's clock
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ string) bool {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		mu.Lock()
		seen++
		k := seen
		mu.Unlock()
		// After the 429, slow answers: at 20/s, 250ms each would need 5 in
		// flight, so the cap of 3 binds.
		if k > throttleAt {
			time.Sleep(250 * time.Millisecond)
		} else {
			time.Sleep(30 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		if k == throttleAt {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			deadline = time.Now().Add(retryAfter)
			return false
		}
		return true
	})
	rdb, err := cfg.NewClient(deploy.ClientTuning{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	ns := testkit.Namespace("procs")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: rc.URL,
		Limit: limits.Limit{Rate: rate, Burst: burst, Period: time.Second}, MaxInFlight: maxInFlight}); err != nil {
		t.Fatal(err)
	}
	env := append(cfg.Env(), "HOOKLANE_LOG_LEVEL=debug")
	var ps []*proc
	for range procs {
		ps = append(ps, startProc(t, cfg.URL, ns, env...))
	}
	for i := range n {
		if _, err := p.Publish(ctx, tasks.Event{ID: fmt.Sprintf("e%03d", i), Type: "t", Data: []byte(`1`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 60*time.Second, "every event delivered", func() bool { return rc.Count() >= n+1 })
	a := rc.Got()
	if len(a) != n+1 { // the 429'd event is sent again
		t.Fatalf("%d requests for %d events and one 429", len(a), n)
	}
	if m := most.Load(); m != maxInFlight {
		t.Errorf("%d requests in flight at most; want the cap, %d, reached (the answers after the 429 are slow) and never passed", m, maxInFlight)
	}
	// 100ms of slack: the processes share two cores with Redis and the sink.
	withinLimit(t, a, rate, burst, 100*time.Millisecond)
	// Before the 429: the steady rate, within 3%: the slope of the
	// arrivals after the burst (least squares), which one late arrival at
	// either end of them does not tilt as it would the rate between the two.
	steady := arrivalRate(a[burst:throttleAt])
	if steady < rate*0.97 || steady > rate*1.03 {
		t.Errorf("steady rate %.2f/s across %d processes, want within 3%% of %d/s", steady, procs, rate)
	}
	// After it: nothing before the deadline, from any process, but what
	// was on its way (sent before the 429 was read: within the in-flight
	// cap, arriving within 50ms of the 429's answer).
	mu.Lock()
	dl := deadline
	mu.Unlock()
	early := 0
	for _, x := range a[throttleAt:] {
		if x.At.Before(dl) {
			if x.At.After(dl.Add(-retryAfter + 50*time.Millisecond)) {
				t.Errorf("a request arrived %v before the Retry-After deadline", dl.Sub(x.At))
			}
			early++
		}
	}
	if early > maxInFlight-1 {
		t.Errorf("%d requests arrived right after the 429; at most %d were on their way", early, maxInFlight-1)
	}
	var shares []int
	count := func() int {
		shares = shares[:0]
		total := 0
		for _, p := range ps {
			c := strings.Count(p.log.String(), "msg=delivered")
			shares, total = append(shares, c), total+c
		}
		return total
	}
	// A process logs a delivery just after the receiver answered it.
	testkit.Poll(5*time.Second, func() bool { return count() == n })
	// Which process gets a task is asynq's race to dequeue it, so shares are
	// lumpy (one of four sometimes gets none); the limits must hold with
	// several taking part.
	active := 0
	for _, s := range shares {
		if s > 0 {
			active++
		}
	}
	if want := min(procs, 2); active < want {
		t.Errorf("%d of %d processes delivered (%v); want at least %d to take part", active, procs, shares, want)
	}
	t.Logf("%d processes: steady %.2f/s (limit %d/s), at most %d in flight, %d on their way at the 429, deliveries by process %v",
		procs, steady, rate, most.Load(), early, shares)
}

// arrivalRate is the least-squares slope of a's arrivals: requests a second.
func arrivalRate(a []testkit.Arrival) float64 {
	var sx, sy, sxx, sxy float64
	for i, x := range a {
		t := x.At.Sub(a[0].At).Seconds()
		sx, sy, sxx, sxy = sx+t, sy+float64(i), sxx+t*t, sxy+t*float64(i)
	}
	n := float64(len(a))
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}
