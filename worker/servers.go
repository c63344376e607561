package worker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// servers are the asynq Servers of one worker process: DequeueLoops per
// lane (fresh and backlog) of each region it serves, so that a backlog in
// one lane never holds up the other, each trying only its lane's shard
// queues.
//
// asynq dequeues by trying a Server's queues one script each, in weighted
// random order, until one has a task: with n shards and one of them busy,
// about (n+1)/2 round trips per task. That is why a single Redis keeps one
// shard per lane, and why lanes get Servers of their own instead of sharing
// one. A Server dequeues one task at a time, a round trip each: a lane's
// several Servers (its Concurrency split among them) dequeue side by side,
// and the more tasks start together, the more gate scripts and outcomes
// share a round trip (the worker's client batches: deploy.AutoPipeline).
type servers struct {
	w      *Worker
	shards int
	mu     sync.Mutex
	byName map[string]*asynq.Server // "<region>/<lane>"
	closed bool
}

// queuesOf is one lane's queues in region.
func (s *servers) queuesOf(region, lane string) map[string]int {
	keys := tasks.Keys(s.w.cfg.Namespace)
	q := map[string]int{}
	for i := range s.shards {
		q[keys.ShardQueue(region, lane, i)] = 1
	}
	return q
}

// serveLegacy starts, once, a Server for region's queues of the release
// before, if any of them holds a task: its tasks are adopted into their
// subscribers' schedules (legacy.go). A Server of its own, not more queues
// of the lanes': asynq would try the empty queues first half the time, a
// wasted round trip per delivery.
func (s *servers) serveLegacy(ctx context.Context, region string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := region + "/legacy"
	if s.closed || s.byName[name] != nil {
		return nil
	}
	keys := tasks.Keys(s.w.cfg.Namespace)
	queues := map[string]int{}
	var names []string
	for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
		for i := range s.shards {
			q := keys.LegacyQueue(region, lane, i)
			queues[q] = 1
			names = append(names, q)
		}
	}
	n, err := s.w.queuedIn(ctx, names)
	if err != nil || n == 0 {
		return err
	}
	srv := asynq.NewServerFromRedisClient(s.w.ap, s.w.asynqConfig(queues, min(s.w.cfg.Concurrency, 20)))
	if err := srv.Start(s.w.handler); err != nil {
		return err
	}
	s.byName[name] = srv
	s.w.cfg.Logger.Info("adopting the release before's queued tasks", "region", region, "tasks", n)
	return nil
}

// serve starts the two lanes' Servers and the dispatcher of region, once.
func (s *servers) serve(region string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("worker: shutting down")
	}
	s.w.h.disp.start(region)
	for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
		for i, conc := range splitConcurrency(s.w.cfg.Concurrency, s.w.cfg.DequeueLoops) {
			name := region + "/" + lane + "/" + strconv.Itoa(i)
			if s.byName[name] != nil {
				continue
			}
			cfg := s.w.asynqConfig(s.queuesOf(region, lane), conc)
			if i > 0 {
				// The lane's first Server polls an idle lane and forwards due
				// tasks at the configured pace; the others, there for a busy
				// lane, join it within a second and forward only as a backup.
				cfg.TaskCheckInterval = max(cfg.TaskCheckInterval, extraLoopPoll)
				cfg.DelayedTaskCheckInterval = max(cfg.DelayedTaskCheckInterval, extraLoopForward)
			}
			srv := asynq.NewServerFromRedisClient(s.w.ap, cfg)
			if err := srv.Start(s.w.handler); err != nil {
				return err
			}
			s.byName[name] = srv
		}
	}
	return nil
}

// stop stops region's Servers (its lanes' and its legacy one) and its
// dispatcher.
func (s *servers) stop(region string) {
	s.mu.Lock()
	var stopping []*asynq.Server
	for name, srv := range s.byName {
		if r, _, _ := strings.Cut(name, "/"); r == region {
			stopping = append(stopping, srv)
			delete(s.byName, name)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, srv := range stopping {
		wg.Go(srv.Shutdown)
	}
	wg.Wait()
	s.w.h.disp.stopRegion(region)
}

// served are the regions whose Servers run, sorted.
func (s *servers) served() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name := range s.byName {
		if r, _, _ := strings.Cut(name, "/"); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// A lane's Servers after its first poll an empty lane every extraLoopPoll
// (asynq sleeps half to one and a half of it between tries; shutting down
// waits for that sleep) and forward due tasks every extraLoopForward.
const (
	extraLoopPoll    = 500 * time.Millisecond
	extraLoopForward = 5 * time.Second
)

// splitConcurrency is each of a lane's Servers' Concurrency: the lane's n
// handler slots over at most loops Servers, as evenly as they go.
func splitConcurrency(n, loops int) []int {
	loops = max(min(loops, n), 1)
	c := make([]int, loops)
	for i := range c {
		c[i] = n / loops
		if i < n%loops {
			c[i]++
		}
	}
	return c
}

// shutdown stops every Server at once, so that together they take at most
// ShutdownTimeout.
func (s *servers) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var wg sync.WaitGroup
	for _, srv := range s.byName {
		wg.Go(srv.Shutdown)
	}
	wg.Wait()
}

// startServers waits for Redis to give the namespace's layout, then starts
// the Servers of every region served. A worker serving all regions looks
// for new ones, and lets go of idle ones, every Config.RegionCheck, until
// ctx is done (regions.go).
func (w *Worker) startServers(ctx context.Context) (*servers, error) {
	var layout deploy.Layout
	for backoff := 250 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		err := w.migrate(ctx)
		if err == nil {
			layout, err = deploy.EnsureLayout(ctx, w.rdb, tasks.Keys(w.cfg.Namespace), w.cfg.Shards)
		}
		if err == nil {
			break
		}
		if errors.Is(err, deploy.ErrLayout) {
			return nil, err
		}
		w.cfg.Logger.Warn("waiting for Redis to read the namespace's layout", "err", err)
		if !sleep(ctx, backoff) {
			return nil, ctx.Err()
		}
	}
	s := &servers{w: w, shards: layout.Shards, byName: map[string]*asynq.Server{}}
	regions, err := w.regions(ctx, nil)
	for ; err != nil; regions, err = w.regions(ctx, nil) {
		if !sleep(ctx, time.Second) {
			return nil, ctx.Err()
		}
	}
	w.h.shards = layout.Shards
	for _, r := range regions {
		if err := s.serve(r); err != nil {
			s.shutdown()
			return nil, err
		}
		if err := s.serveLegacy(ctx, r); err != nil {
			s.shutdown()
			return nil, err
		}
	}
	go w.watchRegions(ctx, s)
	return s, nil
}

// migrate carries what the release before left in the namespace over to
// this layout (producer.Migrate), once per namespace.
func (w *Worker) migrate(ctx context.Context) error {
	rep, err := w.h.prod.Migrate(ctx, false)
	if err == nil && rep != (producer.MigrationReport{}) {
		w.cfg.Logger.Info("deleted the release before's leftovers", "subscribers", rep.Subscribers)
	}
	return err
}

// asynqConfig is the configuration of each of the worker's asynq Servers.
func (w *Worker) asynqConfig(queues map[string]int, concurrency int) asynq.Config {
	cfg := w.cfg
	return asynq.Config{
		Concurrency:              concurrency,
		Queues:                   queues,
		IsFailure:                isFailure,
		RetryDelayFunc:           w.h.retryDelay,
		TaskCheckInterval:        cfg.PollInterval,
		DelayedTaskCheckInterval: cfg.ForwardInterval,
		ShutdownTimeout:          cfg.ShutdownTimeout,
		Logger:                   asynqLogger{cfg.Logger},
		LogLevel:                 asynq.WarnLevel,
	}
}
