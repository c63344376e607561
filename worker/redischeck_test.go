package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/worker"
)

func TestWorkerWarnsAboutUnsafeRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The package's Redis runs without persistence, as tests want it.
	var logs testkit.Buffer
	setup(t, worker.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	testkit.Eventually(t, 5*time.Second, "worker start", func() bool { return strings.Contains(logs.String(), "worker started") })
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "persistence is off") {
		t.Fatalf("no persistence warning in:\n%s", logs.String())
	}

	// A production-like Redis (AOF, noeviction) passes; an evicting one does not.
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	if w, err := worker.CheckRedis(ctx, rdb); err != nil || len(w) != 0 {
		t.Fatalf("production settings: warnings %q, %v; want none", w, err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if w, err := worker.CheckRedis(ctx, rdb); err != nil || len(w) != 1 || !strings.Contains(w[0], "allkeys-lru") {
		t.Fatalf("allkeys-lru: warnings %q, %v; want one naming the policy", w, err)
	}
}
