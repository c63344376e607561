package deploy_test

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
)

// StartRedis passes its settings as flags; they must be the ones
// redis.conf documents for production.
func TestStartRedisMatchesRedisConf(t *testing.T) {
	f, err := os.Open("redis.conf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		want[k] = strings.Trim(v, `"`)
	}
	for _, k := range []string{"bind", "protected-mode", "appendonly", "appendfsync", "maxmemory-policy", "save"} {
		if _, ok := want[k]; !ok {
			t.Fatalf("redis.conf does not set %s", k)
		}
	}

	ctx := context.Background()
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{Dir: t.TempDir(), AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	for k, v := range want {
		if k == "port" {
			continue // StartRedis picks a free one
		}
		got, err := c.ConfigGet(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[k] != v {
			t.Errorf("StartRedis runs with %s %q, redis.conf says %q", k, got[k], v)
		}
	}
}
