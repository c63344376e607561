package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

var redisAddr string

func TestMain(m *testing.M) {
	// The Redis-fault tests make go-redis log every refused dial.
	redis.SetLogger(quietLogger{})
	r, err := deploy.StartRedis(context.Background(), deploy.RedisOpts{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = r.Addr
	code := m.Run()
	r.Stop()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var nsSeq atomic.Int64

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// bundle is one test's producer, running worker and inspector, isolated
// from other tests by its namespace (key prefix and queue name).
type bundle struct {
	ns   string
	rdb  *redis.Client
	p    *producer.Producer
	w    *worker.Worker
	insp *asynq.Inspector
}

// setup starts a worker with cfg (Namespace and Redis filled in) and stops
// it when the test ends.
func setup(t testing.TB, cfg worker.Config) *bundle {
	t.Helper()
	ns := fmt.Sprintf("w%d", nsSeq.Add(1))
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64})
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	w, stop := startWorker(t, rdb, ns, cfg)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() {
		stop()
		rdb.Close()
	})
	return &bundle{ns: ns, rdb: rdb, p: p, w: w, insp: insp}
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
func startWorker(t testing.TB, rdb *redis.Client, ns string, cfg worker.Config) (*worker.Worker, func()) {
	t.Helper()
	cfg.Redis, cfg.Namespace = rdb, ns
	if cfg.AllowedCIDRs == nil {
		cfg.AllowedCIDRs = loopback // the sinks are on 127.0.0.1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return w, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker.Run: %v", err)
		}
	}
}

// settled reports whether nothing in the namespace's queue is still to run.
func (b *bundle) settled(t testing.TB) bool {
	q, err := b.insp.GetQueueInfo(b.ns)
	if err != nil {
		return false
	}
	return q.Pending+q.Active+q.Scheduled+q.Retry+q.Aggregating == 0
}

// arrival is one request a sink received.
type arrival struct {
	at     time.Time
	header http.Header
	body   []byte
}

// sink is an httptest server on 127.0.0.1 that records every request and
// answers with respond (200 when nil).
type sink struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []arrival
	respond  func(w http.ResponseWriter, n int) // n: 0-based arrival index
}

func newSink(t testing.TB, respond func(w http.ResponseWriter, n int)) *sink {
	s := &sink{respond: respond}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.arrivals)
		s.arrivals = append(s.arrivals, arrival{at: time.Now(), header: r.Header.Clone(), body: body})
		s.mu.Unlock()
		if s.respond != nil {
			s.respond(w, n)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) got() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.arrivals...)
}

func (s *sink) count() int { return len(s.got()) }

// eventually polls cond every 20ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
