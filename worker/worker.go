package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// Worker is hooklane's asynq server with the delivery handler.
type Worker struct {
	cfg    Config
	rdb    redis.UniversalClient
	ownRDB bool
	// ap is the same Redis with commands sharing round trips
	// (deploy.AutoPipeline), for asynq (the dequeues and completions of
	// concurrent handlers go in one pipeline), the gates and the producer's
	// hand-outs.
	ap redis.UniversalClient
	// fresh is another such client, the fresh lane's: its asynq Servers'
	// and its runs' Admits and commits, so that a fresh delivery's round
	// trips never wait behind the backlog lane's batches in ap's pipeline.
	fresh   redis.UniversalClient
	handler asynq.Handler // runners, around the mux
	runners *runners
	totals  *totals
	h       *handler
	stats   Stats
	srvs    atomic.Pointer[servers] // once started
}

// Stats returns the worker's live counters.
func (w *Worker) Stats() *Stats { return &w.stats }

// redisTuning is the worker's own Redis client's: commands retried through
// a Redis restart or failover (see New).
var redisTuning = deploy.ClientTuning{MaxRetries: 10, MinRetryBackoff: 250 * time.Millisecond, MaxRetryBackoff: time.Second}

// New builds a Worker; Start or Run it.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.warnGone()
	w := &Worker{cfg: cfg, rdb: cfg.Redis}
	if w.rdb == nil {
		// Ride out a Redis restart or failover (typically a second or two) inside each
		// command: 10 retries, 250ms to 1s apart, give up after 2.5s at the
		// least and about 8s typically. asynq writes a task's next state
		// (completed, retry, archived) once; on failure its syncer retries
		// with a context that is already canceled (asynq v0.26 processor.go,
		// `defer cancel()`), so a delivery finished during an outage would
		// stay active until lease recovery and be sent again 1-2 min later.
		rdb, err := cfg.RedisConfig.NewClient(redisTuning)
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		w.rdb, w.ownRDB = rdb, true
	}
	ap, err := deploy.AutoPipeline(w.rdb)
	if err != nil {
		w.closeRDB()
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.ap = ap
	if w.fresh, err = deploy.AutoPipeline(w.rdb); err != nil {
		w.closeRDB()
		return nil, fmt.Errorf("worker: %w", err)
	}
	keys := tasks.Keys(cfg.Namespace)
	h := &handler{
		cfg: cfg, rdb: w.rdb, gates: limits.NewGates(w.ap), freshGates: limits.NewGates(w.fresh), keys: keys, client: newHTTPClient(cfg),
		room: newWaitRoom(cfg.MaxWaiters, cfg.MaxWaiting), subs: newSubCache(), bodies: newBodies(bodiesMax), log: cfg.Logger, stats: &w.stats,
		sending: make(chan struct{}, maxSending(cfg)),
	}
	// The producer hands out the dispatchers' deliveries and publishes
	// operator events (no WATCH: it never changes a subscriber here).
	if h.prod, err = producer.New(&producer.Config{Redis: w.ap, Namespace: cfg.Namespace, Logger: cfg.Logger,
		DedupWindow: cfg.DedupWindow, PayloadRetention: cfg.PayloadRetention, AllowedCIDRs: cfg.AllowedCIDRs, MaxWait: cfg.MaxWait,
		TenantFreshRate: cfg.TenantFreshRate}); err != nil {
		w.closeRDB()
		return nil, err
	}
	h.flows = newTenantFlows(w.ap, keys, h.prod.TenantFreshRate())
	h.disp = newDispatchers(h)
	h.srvs = &w.srvs
	w.h = h
	h.totals = newTotals(w.rdb, keys, cfg.Logger, &w.stats)
	w.totals = h.totals
	mux := asynq.NewServeMux()
	mux.Handle(tasks.TypeDeliver, h)
	w.runners = newRunners(mux)
	w.handler = w.runners
	return w, nil
}

// laneClient is the client lane's asynq Servers dequeue and complete
// with: the fresh lane's own (Worker.fresh), the backlog's ap.
func (w *Worker) laneClient(lane string) redis.UniversalClient {
	if lane == tasks.LaneFresh {
		return w.fresh
	}
	return w.ap
}

// Run delivers until ctx is done, then shuts down gracefully: it stops
// fetching, lets in-flight deliveries finish for up to ShutdownTimeout and
// puts back the rest.
func (w *Worker) Run(ctx context.Context) error {
	w.warnAboutRedis(ctx)
	go w.totals.run()
	defer w.totals.close() // its last sums go out before the Redis client closes
	reports := newReports(w.h)
	srvs, err := w.startServers(ctx)
	if err != nil {
		w.h.disp.stop()
		w.closeRDB()
		if ctx.Err() != nil {
			return nil // stopped while waiting for Redis
		}
		return err
	}
	w.srvs.Store(srvs)
	attrs := []any{"namespace", w.cfg.Namespace, "concurrency", w.cfg.Concurrency, "queue_shards", srvs.shards}
	if w.ownRDB {
		attrs = append(attrs, "redis", w.cfg.RedisConfig) // passwords redacted
	}
	reports.start()
	w.cfg.Logger.Info("worker started", attrs...)
	<-ctx.Done()
	w.cfg.Logger.Info("worker stopping", "shutdown_timeout", w.cfg.ShutdownTimeout)
	w.h.disp.stop() // no more hand-outs: what is parked stays parked
	srvs.shutdown()
	w.runners.close()
	reports.stop()
	w.totals.close()
	w.h.client.CloseIdleConnections()
	return w.closeRDB()
}

// Close releases the Redis connection the Worker opened, for a Worker that
// was never Run (Run closes it on return).
func (w *Worker) Close() error { return w.closeRDB() }

func (w *Worker) closeRDB() error {
	var err error
	for _, c := range []redis.UniversalClient{w.ap, w.fresh} {
		if c != nil {
			err = errors.Join(err, c.Close())
		}
	}
	if w.ownRDB {
		err = errors.Join(err, w.rdb.Close())
	}
	return err
}

// asynqLogger adapts slog to asynq.Logger.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Fatal(args ...any) {
	a.l.Error(fmt.Sprint(args...), "component", "asynq", "fatal", true)
}
