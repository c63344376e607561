package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"

	"github.com/hooklane/hooklane/web"
)

// The web process reads its Redis as the worker does (deploy.RedisFromEnv),
// so both name the same one; a Sentinel half-configured stops it at start.
func TestFromEnvReadsTheRetentions(t *testing.T) {
	t.Setenv("HOOKLANE_DEDUP_WINDOW", "48h")
	t.Setenv("HOOKLANE_PAYLOAD_RETENTION", "72h")
	t.Setenv("HOOKLANE_MAX_NOT_BEFORE", "720h")
	c, err := web.FromEnv()
	if err != nil || c.DedupWindow != 48*time.Hour || c.PayloadRetention != 72*time.Hour || c.MaxNotBefore != 720*time.Hour {
		t.Fatalf("FromEnv: %v, %v, %v, %v", c.DedupWindow, c.PayloadRetention, c.MaxNotBefore, err)
	}
	for _, v := range []string{"0", "-1h", "a day"} {
		t.Setenv("HOOKLANE_PAYLOAD_RETENTION", v)
		if _, err := web.FromEnv(); err == nil || !strings.Contains(err.Error(), "HOOKLANE_PAYLOAD_RETENTION") {
			t.Fatalf("HOOKLANE_PAYLOAD_RETENTION=%s: %v, want an error naming it", v, err)
		}
	}
}

func TestFromEnvReadsTheRedisConfig(t *testing.T) {
	t.Setenv("HOOKLANE_REDIS_SENTINEL_ADDRS", "127.0.0.1:26379,127.0.0.1:26380")
	t.Setenv("HOOKLANE_REDIS_SENTINEL_MASTER", "main")
	c, err := web.FromEnv()
	if err != nil || c.RedisConfig.Mode() != "sentinel" || c.RedisConfig.SentinelMaster != "main" || len(c.RedisConfig.SentinelAddrs) != 2 {
		t.Fatalf("FromEnv: %s, %v", c.RedisConfig, err)
	}
	t.Setenv("HOOKLANE_REDIS_SENTINEL_MASTER", "")
	if _, err := web.FromEnv(); err == nil || !strings.Contains(err.Error(), "HOOKLANE_REDIS_SENTINEL_MASTER") {
		t.Fatalf("FromEnv without the master's name: %v", err)
	}
}

// HOOKLANE_BATCH_AFTER: how many of a subscriber's tasks wait in asynq
// before its new events travel batched (producer.Config.BatchAfter), 0
// being no cap; anything else is refused, naming it.
func TestFromEnvReadsBatchAfter(t *testing.T) {
	for v, want := range map[string]int{"0": -1, "32": 32} {
		t.Setenv("HOOKLANE_BATCH_AFTER", v)
		if c, err := web.FromEnv(); err != nil || c.BatchAfter != want {
			t.Fatalf("HOOKLANE_BATCH_AFTER=%s: %v, %v; want %v", v, c.BatchAfter, err, want)
		}
	}
	for _, v := range []string{"-1", "10001", "many"} {
		t.Setenv("HOOKLANE_BATCH_AFTER", v)
		if _, err := web.FromEnv(); err == nil || !strings.Contains(err.Error(), "HOOKLANE_BATCH_AFTER") {
			t.Fatalf("HOOKLANE_BATCH_AFTER=%s: %v, want an error naming it", v, err)
		}
	}
}

// The web process reads HOOKLANE_MAX_WAIT as the worker does, 0 being no
// wait, for its publishes' fast path (producer.Config.MaxWait).
func TestFromEnvReadsTheWorkersMaxWait(t *testing.T) {
	for v, want := range map[string]time.Duration{"0": -1, "250ms": 250 * time.Millisecond} {
		t.Setenv("HOOKLANE_MAX_WAIT", v)
		if c, err := web.FromEnv(); err != nil || c.MaxWait != want {
			t.Fatalf("HOOKLANE_MAX_WAIT=%s: %v, %v; want %v", v, c.MaxWait, err, want)
		}
	}
	for _, v := range []string{"-1s", "11s", "soon"} {
		t.Setenv("HOOKLANE_MAX_WAIT", v)
		if _, err := web.FromEnv(); err == nil || !strings.Contains(err.Error(), "HOOKLANE_MAX_WAIT") {
			t.Fatalf("HOOKLANE_MAX_WAIT=%s: %v, want an error naming it", v, err)
		}
	}
}

// hooklane web keeps up to WebPoolSize Redis connections, not go-redis'
// 10 a core (a spike of publishes queued for them), unless REDIS_URL names
// its own pool_size.
func TestServerPoolSize(t *testing.T) {
	for url, want := range map[string]int{redisSrv.URL: web.WebPoolSize, redisSrv.URL + "?pool_size=7": 7} {
		s, err := web.New(web.Config{Token: token, RedisConfig: deploy.RedisConfig{URL: url}, Namespace: testkit.Namespace("pool"), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Redis().(*redis.Client).Options().PoolSize; got != want {
			t.Errorf("REDIS_URL %s: pool size %d; want %d", url, got, want)
		}
		s.Close()
	}
}
