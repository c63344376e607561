package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

var redisSrv *deploy.Redis

func TestMain(m *testing.M) {
	testkit.Main(m, &redisSrv, func() {
		if cluster.c != nil {
			cluster.c.Stop()
		}
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	})
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// bundle is one test's producer, running worker and inspector, isolated
// from other tests by its namespace (key prefix and queue name).
type bundle struct {
	ns   string
	rdb  redis.UniversalClient
	p    *producer.Producer
	w    *worker.Worker
	insp *asynq.Inspector
}

// setup starts a worker with cfg (Namespace and Redis filled in) on the
// package's Redis and stops it when the test ends.
func setup(t testing.TB, cfg worker.Config) *bundle {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 64})
	t.Cleanup(func() { rdb.Close() }) // registered first, so it runs after the worker's stop
	return setupOn(t, rdb, testkit.Namespace("w"), cfg)
}

// setupOn is setup on a client of the test's own (a Cluster's, a
// Sentinel's) and namespace ns; the caller closes rdb.
func setupOn(t testing.TB, rdb redis.UniversalClient, ns string, cfg worker.Config) *bundle {
	t.Helper()
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	w, stop := startWorker(t, rdb, ns, cfg)
	t.Cleanup(stop)
	return &bundle{ns: ns, rdb: rdb, p: p, w: w, insp: asynq.NewInspectorFromRedisClient(rdb)}
}

func (b *bundle) put(t testing.TB, s tasks.Subscriber) tasks.Subscriber {
	t.Helper()
	got, err := b.p.PutSubscriber(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (b *bundle) publish(t testing.TB, id, typ string) *producer.PublishResult {
	t.Helper()
	res, err := b.p.Publish(context.Background(), tasks.Event{ID: id, Type: typ, Data: json.RawMessage(`{"n":1}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// dead returns the ledger entries q selects (one page), failing the test
// on an error.
func (b *bundle) dead(t testing.TB, q producer.DeadLetterQuery) []tasks.DeadLetter {
	t.Helper()
	dl, _, err := b.p.DeadLetters(context.Background(), q)
	if err != nil {
		t.Fatalf("DeadLetters(%+v): %v", q, err)
	}
	return dl
}

// ledgerEntry waits for the ledger entry of taskID and returns it.
func (b *bundle) ledgerEntry(t testing.TB, taskID string) tasks.DeadLetter {
	t.Helper()
	var dl []tasks.DeadLetter
	testkit.Eventually(t, 20*time.Second, "the ledger entry of "+taskID, func() bool {
		dl = b.dead(t, producer.DeadLetterQuery{IDs: []string{taskID}, IncludeReplayed: true})
		return len(dl) == 1
	})
	return dl[0]
}

// counter reads one of a subscriber's counters in Redis.
func (b *bundle) counter(t testing.TB, sub, field string) int64 {
	st, err := worker.ReadStats(context.Background(), b.rdb, b.ns, sub)
	if err != nil {
		t.Fatal(err)
	}
	return st[field]
}

// startWorker runs a worker on ns (sinks on loopback allowed and logs
// dropped unless cfg says otherwise) until the returned stop is called;
// stop returns when Run has.
func startWorker(t testing.TB, rdb redis.UniversalClient, ns string, cfg worker.Config) (*worker.Worker, func()) {
	t.Helper()
	cfg.Redis, cfg.Namespace = rdb, ns
	if cfg.AllowedCIDRs == nil {
		cfg.AllowedCIDRs = loopback // the sinks are on 127.0.0.1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// The tests' idle poll is 100 ms, as the processes' is 50 ms (crashEnv):
	// what they measure is hooklane, not an idle worker's 500 ms default
	// (up to half a second before each phase of a test starts), which
	// TestIdleWorkerSendsAtMost20CommandsASecond measures with the
	// defaults.
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 100*time.Millisecond)
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	// Until it serves its first region a publish sees no worker and parks
	// a subscriber's events after the first (producer/serving.go): the
	// tests publish to a worker that serves.
	first := tasks.DefaultRegion
	if len(cfg.Regions) > 0 {
		first = cfg.Regions[0]
	}
	testkit.Eventually(t, 10*time.Second, "the worker serving region "+first, func() bool {
		return rdb.Exists(context.Background(), tasks.Keys(ns).Serving(first)).Val() == 1
	})
	return w, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker.Run: %v", err)
		}
	}
}

// settled reports whether nothing in the namespace is still to run: its
// queues and its subscribers' schedules are empty.
func (b *bundle) settled(t testing.TB) bool { return testkit.Settled(t, b.rdb, b.insp, b.ns) }

// withinLimit fails t if any window of arrivals (in arrival order) holds
// more than burst + rate·(its span + slack); slack covers the gap between
// the limiter's decision and the sink's clock.
func withinLimit(t testing.TB, a []testkit.Arrival, rate float64, burst int, slack time.Duration) {
	t.Helper()
	for i := range a {
		for j := i; j < len(a); j++ {
			window := a[j].At.Sub(a[i].At) + slack
			if allowed := float64(burst) + rate*window.Seconds(); float64(j-i+1) > allowed {
				t.Fatalf("%d arrivals in %v (from #%d), the limit allows %.1f", j-i+1, window, i, allowed)
			}
		}
	}
}

// noBreaker turns the circuit breaker off, for tests of many dead letters
// from an endpoint that always fails (the breaker would hold them).
var noBreaker = limits.BreakerPolicy{Failures: limits.BreakerOff}

// procBundle is a bundle whose worker is a real `hooklane worker` process
// (crashEnv, then env), on the package's Redis; b.w is nil.
func procBundle(t testing.TB, env ...string) *bundle {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	ns := testkit.Namespace("w")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	startProc(t, redisURL(), ns, env...)
	return &bundle{ns: ns, rdb: rdb, p: p, insp: asynq.NewInspectorFromRedisClient(rdb)}
}

// deadCount is how many dead letters the worker counted for sub.
func (b *bundle) deadCount(t testing.TB, sub string) int64 {
	st, err := worker.ReadStats(context.Background(), b.rdb, b.ns, sub)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for k, v := range st {
		if strings.HasPrefix(k, "dead:") {
			n += v
		}
	}
	return n
}
