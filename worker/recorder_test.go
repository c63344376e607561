package worker

// Internal tests of the recorder and of a panicking handler: they reach
// into the worker (its HTTP transport, its recorder), so they start a
// redis-server of their own.

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

func ownRedis(t *testing.T, o deploy.RedisOpts) *deploy.Redis {
	t.Helper()
	r, err := deploy.StartRedis(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// panicOnce is a transport whose first request panics.
type panicOnce struct {
	next http.RoundTripper
	done atomic.Bool
}

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if !p.done.Swap(true) {
		panic("boom")
	}
	return p.next.RoundTrip(r)
}

// A panic while delivering is a counted failure of that task alone: its
// in-flight slot is released at once, not after its ttl, and it is retried.
func TestPanicReleasesItsSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := ownRedis(t, deploy.RedisOpts{})
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { rdb.Close() })
	ns := testkit.Namespace("panic")
	// A leaked slot would hold for RequestTimeout + MaxWait + 5s. (A short
	// timeout: net/http's timer goroutine of the panicked request lives
	// that long.)
	w, err := New(Config{Redis: rdb, Namespace: ns, Logger: quiet, RequestTimeout: 500 * time.Millisecond,
		ConnectTimeout: 500 * time.Millisecond, BackoffBase: time.Minute,
		BackoffMax: time.Minute, AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	w.h.client.Transport = &panicOnce{next: w.h.client.Transport}
	s := testkit.NewSink(t, nil)
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: s.URL, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	if _, err := p.Publish(ctx, tasks.Event{ID: "e1", Type: "t", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the panicked run counted as a failure", func() bool { return w.Stats().Failed.Load() == 1 })
	// Released with the run's outcome, not after its ttl.
	testkit.Eventually(t, 2*time.Second, "its slot released", func() bool {
		n, err := rdb.ZCard(ctx, tasks.Keys(ns).Gates("s").InFlight).Result()
		return err == nil && n == 0
	})
	info, err := testkit.Task(asynq.NewInspectorFromRedisClient(rdb), ns, "s:e1")
	if err != nil || info.State != asynq.TaskStateRetry || info.Retried != 1 || !strings.Contains(info.LastErr, "panicked") {
		t.Fatalf("the panicked task: %s; want retrying, one attempt spent, the panic named", testkit.State(info, err))
	}
}

// blackhole accepts connections and never answers: a Redis that hangs.
func blackhole(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// With Redis hanging, handing a run to the recorder never blocks the
// handler (it writes its own run when the queue is full), and the
// recorder still stops.
func TestRecorderNeverBlocks(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: blackhole(t), ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	h := &handler{rdb: rdb, gates: limits.NewGates(rdb), keys: tasks.Keys("rec"), room: newWaitRoom(1, 1), log: quiet, stats: &Stats{}}
	h.recorder = newRecorder(h)
	go h.recorder.run()
	d := &tasks.Delivery{SubscriberID: "s", Event: tasks.Event{ID: "e"}, ExpiresAt: time.Now().Add(time.Hour)}
	var refused atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 1000 {
				x := recorded{r: run{taskID: "s:e", sub: "s", d: d, keys: h.keys.Gates("s"), token: "t" + string(rune('a'+g))}}
				if !h.recorder.add(x) {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 2*time.Second || refused.Load() == 0 {
		t.Fatalf("4,000 adds took %v with %d refused; want them never to block on a full queue", took, refused.Load())
	}
	closed := make(chan struct{})
	go func() { h.recorder.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the recorder did not stop with Redis hanging")
	}
}

// A batch that could not be written is kept and written once Redis is
// back: the slots it releases do not wait out their ttl.
func TestRecorderRetriesAFailedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	port, err := deploy.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := ownRedis(t, deploy.RedisOpts{Dir: dir, Port: port, AppendOnly: true})
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	keys := tasks.Keys("retry")
	k := keys.Gates("s")
	if err := rdb.ZAdd(ctx, k.InFlight, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "slot"}).Err(); err != nil {
		t.Fatal(err)
	}
	r.Stop() // AOF: the slot survives the restart
	h := &handler{rdb: rdb, gates: limits.NewGates(rdb), keys: keys, room: newWaitRoom(1, 1), log: quiet, stats: &Stats{}}
	h.recorder = newRecorder(h)
	go h.recorder.run()
	d := &tasks.Delivery{SubscriberID: "s", Event: tasks.Event{ID: "e"}, ExpiresAt: time.Now().Add(time.Hour)}
	h.recorder.add(recorded{r: run{taskID: "s:e", sub: "s", d: d, keys: k, token: "slot"}, fields: []string{"failed"}})
	testkit.Eventually(t, 10*time.Second, "a failed write counted", func() bool { return h.stats.RecordErrors.Load() > 0 })
	ownRedis(t, deploy.RedisOpts{Dir: dir, Port: port, AppendOnly: true})
	testkit.Eventually(t, 10*time.Second, "the slot released once Redis is back", func() bool {
		n, err := rdb.ZCard(ctx, k.InFlight).Result()
		return err == nil && n == 0
	})
	h.recorder.close()
	if n, _ := rdb.HGet(ctx, keys.Stats("s"), "failed").Int(); n != 1 {
		t.Fatalf("counter failed = %d after the retry, want 1", n)
	}
}
