package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
)

// Commands sent one at a time by concurrent goroutines share round trips,
// and each keeps its own reply and error: a counter incremented from 64
// goroutines ends where it must, a missing key answers redis.Nil to its
// caller alone, a command Redis refuses fails its caller alone; a script
// falls back from its sha as it would; a MULTI/EXEC pipeline runs as one.
// A server of its own: it counts the server's round trips.
func TestAutoPipelineSharesRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	plain, ap := autoPipelined(t, r.Addr)
	if err := ap.Set(ctx, "text", "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 64, 50
	before := testkit.InfoInt(t, plain, "stats", "total_reads_processed")
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if err := ap.Incr(ctx, "counter").Err(); err != nil {
					errs <- err
					return
				}
				if err := ap.Get(ctx, fmt.Sprintf("missing:%d:%d", g, i)).Err(); !errors.Is(err, redis.Nil) {
					errs <- fmt.Errorf("GET of a missing key: %v, want redis.Nil", err)
					return
				}
				if g == 0 && i == 0 {
					if err := ap.Incr(ctx, "text").Err(); err == nil || !strings.Contains(err.Error(), "not an integer") {
						errs <- fmt.Errorf("INCR of a string: %v, want Redis' refusal", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	trips := testkit.InfoInt(t, plain, "stats", "total_reads_processed") - before - 1 // the INFO
	if n, err := plain.Get(ctx, "counter").Int(); err != nil || n != goroutines*each {
		t.Fatalf("counter %d (%v); want %d", n, err, goroutines*each)
	}
	if sent := int64(2*goroutines*each + 1); trips >= sent/2 {
		t.Fatalf("%d commands took %d round trips; want them batched (fewer than half)", sent, trips)
	} else {
		t.Logf("%d commands in %d round trips", sent, trips)
	}

	script := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	if n, err := script.Run(ctx, ap, []string{"scripted"}, 5).Int(); err != nil || n != 5 {
		t.Fatalf("a script Redis did not know: %d, %v; want 5", n, err)
	}
	cmds, err := ap.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "tx")
		p.Incr(ctx, "tx")
		return nil
	})
	if err != nil || len(cmds) != 2 || cmds[1].(*redis.IntCmd).Val() != 2 {
		t.Fatalf("MULTI/EXEC: %v, %v; want 1 then 2", cmds, err)
	}
}

// The auto-pipelined client keeps the options it was made from, the ones
// go-redis reads back as resolved too: "no retries" stays no retries (a
// fault test relies on it) and "no timeout" stays none.
func TestAutoPipelineKeepsTheOptions(t *testing.T) {
	t.Parallel()
	for i, o := range []redis.Options{
		{Addr: "127.0.0.1:1", MaxRetries: -1, ReadTimeout: -1, WriteTimeout: -2, MinRetryBackoff: -1, MaxRetryBackoff: -1},
		{Addr: "127.0.0.1:1"},
		{Addr: "127.0.0.1:1", MaxRetries: 7, ReadTimeout: time.Second},
	} {
		c := redis.NewClient(&o)
		ap, err := deploy.AutoPipeline(c)
		if err != nil {
			t.Fatal(err)
		}
		a, b := c.Options(), ap.(*redis.Client).Options()
		if a.MaxRetries != b.MaxRetries || a.ReadTimeout != b.ReadTimeout || a.WriteTimeout != b.WriteTimeout ||
			a.MinRetryBackoff != b.MinRetryBackoff || a.MaxRetryBackoff != b.MaxRetryBackoff {
			t.Errorf("options %d: retries %d, timeouts %v/%v, backoffs %v/%v; want %d, %v/%v, %v/%v", i, b.MaxRetries,
				b.ReadTimeout, b.WriteTimeout, b.MinRetryBackoff, b.MaxRetryBackoff, a.MaxRetries, a.ReadTimeout, a.WriteTimeout,
				a.MinRetryBackoff, a.MaxRetryBackoff)
		}
		if a.PushNotificationProcessor != nil && a.PushNotificationProcessor == b.PushNotificationProcessor {
			t.Errorf("options %d: the new client shares the first one's push-notification processor", i)
		}
		c.Close()
		ap.Close()
	}
	co := redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, ReadTimeout: -1}
	c := redis.NewClusterClient(&co)
	ap, err := deploy.AutoPipeline(c)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := c.Options(), ap.(*redis.ClusterClient).Options(); a.MaxRetries != b.MaxRetries || a.ReadTimeout != b.ReadTimeout {
		t.Errorf("cluster: retries %d, timeout %v; want %d, %v", b.MaxRetries, b.ReadTimeout, a.MaxRetries, a.ReadTimeout)
	}
	c.Close()
	ap.Close()
}

// A client in use can be auto-pipelined: its connections starting (which
// change its options' notification settings) race nothing with the copy
// AutoPipeline makes (run under -race, as make test does).
func TestAutoPipelineOfAClientInUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	var wg sync.WaitGroup
	for range 32 { // 32 connections start at once
		wg.Go(func() { _ = c.Ping(ctx).Err() })
	}
	for range 8 {
		wg.Go(func() {
			ap, err := deploy.AutoPipeline(c)
			if err != nil {
				t.Error(err)
				return
			}
			if err := ap.Ping(ctx).Err(); err != nil {
				t.Error(err)
			}
			ap.Close()
		})
	}
	wg.Wait()
}

// Two batches may be on their way at once: while one waits in Redis (here
// a BLPOP that blocks its connection until the test pushes), a command
// sent meanwhile goes in a second batch and is answered, instead of
// waiting for the first batch to come back.
func TestAutoPipelineSendsASecondBatchWhileOneIsOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain, ap := autoPipelined(t, redisSrv.Addr)
	list, key := testkit.Namespace("ap")+":list", testkit.Namespace("ap")+":key"
	if err := plain.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	popped := make(chan error, 1)
	go func() { popped <- ap.BLPop(ctx, 2*time.Second, list).Err() }()
	testkit.Eventually(t, 2*time.Second, "the BLPOP to block in Redis", func() bool {
		return testkit.InfoInt(t, plain, "clients", "blocked_clients") > 0
	})
	got := make(chan string, 1)
	go func() { v, _ := ap.Get(ctx, key).Result(); got <- v }()
	answered := testkit.Poll(time.Second, func() bool { return len(got) > 0 })
	if err := plain.RPush(ctx, list, "x").Err(); err != nil { // unblocks the first batch
		t.Fatal(err)
	}
	if err := <-popped; err != nil {
		t.Fatalf("BLPOP: %v", err)
	}
	if !answered {
		t.Fatalf("a GET sent while a blocked batch was out waited for it to come back; want it sent in a second batch")
	}
	if v := <-got; v != "v" {
		t.Fatalf("GET %q, want %q", v, "v")
	}
}

// autoPipelined is a plain client of the Redis at addr and an
// auto-pipelined one made from it, closed when the test ends.
func autoPipelined(t *testing.T, addr string) (*redis.Client, redis.UniversalClient) {
	t.Helper()
	plain := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { plain.Close() })
	ap, err := deploy.AutoPipeline(plain)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ap.Close() })
	return plain, ap
}
