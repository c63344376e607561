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

// BenchmarkRedisBytes reports Redis' used_memory per pending delivery
// (published, no worker running) and per delivered one kept for the dedup
// window (its delivery record, its share of the event's payload kept once,
// its log entry), for 10,000 events to one subscriber with a 20-byte and
// a 1 KiB payload, and for 2,000 events of 2 KiB each fanned out to 5
// subscribers (also per event), on a Redis of its own: the capacity
// model's memory figures (deploy/BENCHMARKS.md). used_memory includes
// Redis' own overhead, part of which follows the run (hash tables sized
// at the peak, client buffers); dataset-bytes (used_memory_dataset) is
// what the keys themselves hold.
//
//	go test -run '^$' -bench RedisBytes -benchtime 1x ./worker/
func BenchmarkRedisBytes(b *testing.B) {
	for _, c := range []struct{ size, subs, n int }{{20, 1, 10_000}, {1024, 1, 10_000}, {2048, 5, 2_000}} {
		b.Run(fmt.Sprintf("payload=%dB/subscribers=%d", c.size, c.subs), func(b *testing.B) {
			for range b.N {
				pending, delivered, dataset := redisBytes(b, c.size, c.subs, c.n)
				b.ReportMetric(pending, "bytes/pending-delivery")
				b.ReportMetric(delivered, "bytes/delivered-delivery")
				b.ReportMetric(dataset, "dataset-bytes/delivered-delivery")
				if c.subs > 1 {
					b.ReportMetric(delivered*float64(c.subs), "bytes/delivered-event")
				}
			}
		})
	}
}

func redisBytes(b *testing.B, size, subs, n int) (pending, delivered, dataset float64) {
	ctx := context.Background()
	srv, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
	defer rdb.Close()
	ns := testkit.Namespace("bytes")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	sink := testkit.NewSink(b, nil)
	for i := range subs {
		s := tasks.Subscriber{ID: fmt.Sprintf("s%d", i), URL: sink.URL, Limit: limits.PerSecond(1_000_000), MaxInFlight: 200}
		if _, err := p.PutSubscriber(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	data := []byte(`"` + strings.Repeat("x", size-2) + `"`)
	base, baseData := usedMemory(b, rdb), testkit.InfoInt(b, rdb, "memory", "used_memory_dataset")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				if _, err := p.Publish(ctx, tasks.Event{ID: fmt.Sprintf("e%06d", i), Type: "t", Data: data}, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	deliveries := float64(n * subs)
	pending = float64(usedMemory(b, rdb)-base) / deliveries
	_, stop := startWorker(b, rdb, ns, worker.Config{})
	testkit.Eventually(b, 2*time.Minute, "every delivery", func() bool { return sink.Count() == n*subs })
	stop()
	delivered = float64(usedMemory(b, rdb)-base) / deliveries
	dataset = float64(testkit.InfoInt(b, rdb, "memory", "used_memory_dataset")-baseData) / deliveries
	return pending, delivered, dataset
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	return testkit.InfoInt(b, rdb, "memory", "used_memory")
}
