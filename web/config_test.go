package web_test

import (
	"strings"
	"testing"

	"github.com/hooklane/hooklane/web"
)

// The web process reads its Redis as the worker does (deploy.RedisFromEnv),
// so both name the same one; a Sentinel half-configured stops it at start.
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
