package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// BenchmarkRedisBytes reports Redis' used_memory per pending task (published,
// no worker running) and per delivered task kept for the dedup window, for
// 10,000 events to one subscriber with a 20-byte and a 1 KiB payload, on a
// Redis of its own: the capacity model's memory figures
// (deploy/BENCHMARKS.md).
//
//	go test -run '^$' -bench RedisBytes -benchtime 1x ./worker/
func BenchmarkRedisBytes(b *testing.B) {
	for _, size := range []int{20, 1024} {
		b.Run(fmt.Sprintf("payload=%dB", size), func(b *testing.B) {
			for range b.N {
				pending, delivered := redisBytes(b, size, 10_000)
				b.ReportMetric(pending, "bytes/pending-task")
				b.ReportMetric(delivered, "bytes/delivered-task")
			}
		})
	}
}

func redisBytes(b *testing.B, size, n int) (pending, delivered float64) {
	ctx := context.Background()
	srv, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
	defer rdb.Close()
	ns := testkit.Namespace("bytes")
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	sink := testkit.NewSink(b, nil)
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: sink.URL, Limit: limits.PerSecond(1_000_000), MaxInFlight: 200}); err != nil {
		b.Fatal(err)
	}
	data := []byte(`"` + strings.Repeat("x", size-2) + `"`)
	base := usedMemory(b, rdb)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				if _, err := p.SendTo(ctx, "s", tasks.Event{ID: fmt.Sprintf("e%06d", i), Type: "t", Data: data}, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	pending = float64(usedMemory(b, rdb)-base) / float64(n)
	_, stop := startWorker(b, rdb, ns, worker.Config{})
	testkit.Eventually(b, 2*time.Minute, "every delivery", func() bool { return sink.Count() == n })
	stop()
	delivered = float64(usedMemory(b, rdb)-base) / float64(n)
	return pending, delivered
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	return infoInt(b, rdb, "memory", "used_memory")
}
