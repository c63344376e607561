package worker_test

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A variable that is set means what it says: zero is refused with an error
// naming the variable (it would silently become the default), except where
// zero has a meaning of its own; negatives are refused everywhere.
func TestFromEnvRefusesZeroAndNegativeValues(t *testing.T) {
	vars := []string{"HOOKLANE_CONCURRENCY", "HOOKLANE_DEQUEUE_LOOPS", "HOOKLANE_MAX_WAITERS", "HOOKLANE_MAX_WAITING", "HOOKLANE_CONNECT_TIMEOUT",
		"HOOKLANE_REQUEST_TIMEOUT", "HOOKLANE_MAX_RETRY_AFTER", "HOOKLANE_BACKOFF_BASE", "HOOKLANE_BACKOFF_MAX",
		"HOOKLANE_POLL_INTERVAL", "HOOKLANE_FORWARD_INTERVAL", "HOOKLANE_SHUTDOWN_TIMEOUT",
		"HOOKLANE_DEDUP_WINDOW", "HOOKLANE_PAYLOAD_RETENTION"}
	for _, name := range vars {
		for _, v := range []string{"0", "-1", "0s", "-5s"} {
			t.Run(name+"="+v, func(t *testing.T) {
				t.Setenv(name, v)
				_, err := worker.FromEnv()
				if err == nil || !strings.Contains(err.Error(), name) {
					t.Fatalf("%s=%s: err %v, want an error naming the variable", name, v, err)
				}
			})
		}
	}
	for _, v := range []string{"-1", "lots"} {
		t.Setenv("HOOKLANE_RESPONSE_BODY_BYTES", v)
		if _, err := worker.FromEnv(); err == nil || !strings.Contains(err.Error(), "HOOKLANE_RESPONSE_BODY_BYTES") {
			t.Fatalf("HOOKLANE_RESPONSE_BODY_BYTES=%s: %v, want an error naming it", v, err)
		}
	}
	// Zero means something here: no in-handler wait, keep dead letters,
	// keep no response body.
	t.Setenv("HOOKLANE_MAX_WAIT", "0")
	t.Setenv("HOOKLANE_DEAD_LETTER_RETENTION", "0s")
	t.Setenv("HOOKLANE_RESPONSE_BODY_BYTES", "0")
	c, err := worker.FromEnv()
	if err != nil || c.MaxWait != worker.NoWait || c.DeadLetterRetention != 0 || c.ResponseBody != worker.NoResponseBody {
		t.Fatalf("MAX_WAIT=0, RETENTION=0s, RESPONSE_BODY_BYTES=0: %+v, %v; want NoWait, keep, none", c, err)
	}
	if c = c.WithDefaults(); c.MaxWait != worker.NoWait {
		t.Fatalf("WithDefaults turned MaxWait=NoWait into %v", c.MaxWait)
	}
	w, err := worker.New(c)
	if err != nil {
		t.Fatalf("New with NoWait: %v", err)
	}
	w.Close()
	t.Setenv("HOOKLANE_MAX_WAIT", "-1s")
	if _, err := worker.FromEnv(); err == nil {
		t.Fatal("MAX_WAIT=-1s accepted")
	}
	// The Go API refuses what the environment does.
	for _, c := range []worker.Config{{Concurrency: -1}, {DequeueLoops: -2}, {MaxWaiting: -3}, {BackoffBase: -time.Second}, {ShutdownTimeout: -1}, {MaxWait: -2}} {
		if _, err := worker.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// HOOKLANE_MAX_WAIT=0 means no in-handler wait: a request the rate limit
// would let go 100ms later is deferred, not waited for.
// A setting of the release before that no longer means anything is
// refused at start, whatever its value, saying why: nobody should believe
// a paused subscriber's events are looked at again every 30s.
// A setting of a release before that no longer means anything is a
// warning naming it and saying why, not a refusal: the worker starts and
// delivers, whatever the value (a deploy that still sets it is not
// stopped by an upgrade).
func TestGoneSettingIsAWarning(t *testing.T) {
	for _, v := range []string{"30s", "0"} {
		t.Setenv("HOOKLANE_PAUSE_RECHECK", v)
		cfg, err := worker.FromEnv()
		if err != nil {
			t.Fatalf("HOOKLANE_PAUSE_RECHECK=%s: %v; want the worker to start", v, err)
		}
		var logs testkit.Buffer
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		b := setup(t, cfg)
		warned := func(line string) bool {
			return strings.Contains(line, "level=WARN") && strings.Contains(line, "setting=HOOKLANE_PAUSE_RECHECK") &&
				strings.Contains(line, "ignored") && strings.Contains(line, "never looked at again")
		}
		if n := len(slices.DeleteFunc(strings.Split(logs.String(), "\n"), func(l string) bool { return !warned(l) })); n != 1 {
			t.Fatalf("HOOKLANE_PAUSE_RECHECK=%s: %d warnings naming it; want 1 saying it is ignored and why:\n%s", v, n, logs.String())
		}
		s := testkit.NewSink(t, nil)
		b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
		b.publish(t, "e1", "t")
		testkit.Eventually(t, 10*time.Second, "a delivery", func() bool { return s.Count() == 1 })
	}
}

func TestMaxWaitZeroWaitsNothing(t *testing.T) {
	t.Setenv("HOOKLANE_MAX_WAIT", "0")
	cfg, err := worker.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, cfg)
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.Limit{Rate: 10, Burst: 1, Period: time.Second}})
	for i := range 3 {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 10*time.Second, "three deliveries", func() bool { return s.Count() == 3 })
	testkit.Eventually(t, 5*time.Second, "the counters", func() bool { return b.counter(t, "s", "delivered") == 3 })
	if n := b.counter(t, "s", "deferred:"+tasks.StateScheduled); n < 1 {
		t.Fatalf("%d rate-limit deferrals with MAX_WAIT=0; the 2nd and 3rd requests must not wait in the handler", n)
	}
}

// The worker reads its Redis through deploy.RedisFromEnv: a cluster's
// addresses arrive as such, and two modes at once stop it at start.
func TestFromEnvReadsTheRedisConfig(t *testing.T) {
	t.Setenv("HOOKLANE_REDIS_CLUSTER_ADDRS", "127.0.0.1:7000,127.0.0.1:7001")
	c, err := worker.FromEnv()
	if err != nil || !c.RedisConfig.IsCluster() || len(c.RedisConfig.ClusterAddrs) != 2 {
		t.Fatalf("FromEnv: %s, %v; want the cluster's two addresses", c.RedisConfig, err)
	}
	t.Setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
	if _, err := worker.FromEnv(); err == nil || !strings.Contains(err.Error(), "REDIS_URL and HOOKLANE_REDIS_CLUSTER_ADDRS") {
		t.Fatalf("FromEnv with two modes: %v", err)
	}
	if _, err := worker.New(worker.Config{RedisConfig: deploy.RedisConfig{SentinelMaster: "m"}}); err == nil ||
		!strings.Contains(err.Error(), "HOOKLANE_REDIS_SENTINEL_ADDRS") {
		t.Fatalf("New with a sentinel master and no sentinels: %v", err)
	}
}
