package worker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
//
// An idle lane runs only its first Server: each Server costs Redis a few
// commands a second doing nothing (asynq's heartbeat, its cancelation
// subscription's keep-alive, its forwarder, janitor and recoverer, and
// its dequeue polls), 16 of them per region about 100 commands a second
// (deploy/BENCHMARKS.md, "Idle cost"). The others start the moment two of
// the lane's tasks run at once, and stop once the lane has run nothing for
// extraLoopLinger (looked at every Config.RegionCheck); a first Server of
// one slot starts them with its first task. Stopping them is
// their graceful shutdown, as when a region is let go: a task one of them
// took meanwhile finishes first.
type servers struct {
	w      *Worker
	shards int
	mu     sync.Mutex
	byName map[string]*asynq.Server // "<region>/<lane>/<loop>", "<region>/legacy"
	lanes  map[string]*laneLoops    // "<region>/<lane>"
	closed bool
}

// laneLoops is what one lane's Servers share: its tasks running, when one
// last started or ended, and whether its Servers after the first run.
type laneLoops struct {
	region, lane string
	s            *servers
	busy         int64 // tasks running at once that start the others: 2, or 1 when the first has 1 slot
	running      atomic.Int64
	last         atomic.Int64 // Unix ns
	extras       atomic.Bool  // started, or starting
}

// ProcessTask is the lane's Servers' Handler: the worker's, counted.
func (l *laneLoops) ProcessTask(ctx context.Context, t *asynq.Task) error {
	l.last.Store(time.Now().UnixNano())
	if l.running.Add(1) >= l.busy && l.extras.CompareAndSwap(false, true) {
		go l.s.startExtras(l)
	}
	defer func() {
		l.last.Store(time.Now().UnixNano())
		l.running.Add(-1)
	}()
	return l.s.w.handler.ProcessTask(ctx, t)
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

// serve starts the first Server of each of region's two lanes and its
// dispatcher, once.
func (s *servers) serve(region string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("worker: shutting down")
	}
	s.w.h.disp.start(region)
	for _, lane := range []string{tasks.LaneFresh, tasks.LaneBacklog} {
		name := region + "/" + lane
		if s.lanes[name] == nil {
			first := splitConcurrency(s.w.cfg.Concurrency, s.w.cfg.DequeueLoops)[0]
			s.lanes[name] = &laneLoops{region: region, lane: lane, s: s, busy: min(2, int64(first))}
		}
		if s.byName[name+"/0"] != nil {
			continue
		}
		if err := s.startLoop(s.lanes[name], 0); err != nil {
			return err
		}
	}
	return nil
}

// startLoop starts loop i of lane l; s.mu is held.
func (s *servers) startLoop(l *laneLoops, i int) error {
	conc := splitConcurrency(s.w.cfg.Concurrency, s.w.cfg.DequeueLoops)
	if i >= len(conc) {
		return nil
	}
	cfg := s.w.asynqConfig(s.queuesOf(l.region, l.lane), conc[i])
	switch {
	case i == 1:
		// The first of the others, there for a busy lane, looks again
		// soon after finding it empty: the next turn's batch waits for
		// no poll (quickLoopPoll).
		cfg.TaskCheckInterval = quickLoopPoll
		cfg.DelayedTaskCheckInterval = max(cfg.DelayedTaskCheckInterval, extraLoopForward)
	case i > 0:
		// The lane's first Server polls an idle lane and forwards due
		// tasks at the configured pace; the others, there for a busy
		// lane, poll only between its tasks and forward as a backup.
		cfg.TaskCheckInterval = max(cfg.TaskCheckInterval, extraLoopPoll)
		cfg.DelayedTaskCheckInterval = max(cfg.DelayedTaskCheckInterval, extraLoopForward)
	case l.lane == tasks.LaneBacklog:
		// A flood's lane: a second more before its first task starts
		// is nothing beside the flood's wait.
		cfg.TaskCheckInterval = 2 * cfg.TaskCheckInterval
	}
	srv := asynq.NewServerFromRedisClient(s.w.laneClient(l.lane), cfg)
	if err := srv.Start(l); err != nil {
		return err
	}
	s.byName[l.region+"/"+l.lane+"/"+strconv.Itoa(i)] = srv
	return nil
}

// startExtras starts lane l's Servers after its first, which a second task
// running at once asked for.
func (s *servers) startExtras(l *laneLoops) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.lanes[l.region+"/"+l.lane] != l {
		return // shutting down, or the region was let go
	}
	for i := 1; i < s.w.cfg.DequeueLoops; i++ {
		if err := s.startLoop(l, i); err != nil {
			s.w.cfg.Logger.Warn("could not start a busy lane's dequeue loop; it is tried again at its next busy moment",
				"region", l.region, "lane", l.lane, "err", err)
			stopping := s.take(func(name string) bool { return isExtra(name, l) })
			l.extras.Store(false)
			go shutdownAll(stopping)
			return
		}
	}
}

// handedOut tells region's lane that this process's dispatcher handed it
// a batch: a busy lane, whose queue a turn fills a batch at a time and
// its Servers empty between turns. Its Servers after its first start, if
// they do not run, and its quick one takes each batch within a poll of
// quickLoopPoll, not of Config.PollInterval.
func (s *servers) handedOut(region, lane string) {
	s.mu.Lock()
	l := s.lanes[region+"/"+lane]
	s.mu.Unlock()
	if l == nil {
		return
	}
	l.last.Store(time.Now().UnixNano())
	if l.extras.CompareAndSwap(false, true) {
		go s.startExtras(l)
	}
}

// stopIdleExtras stops the Servers after the first of each lane that has
// run no task for linger.
func (s *servers) stopIdleExtras(linger time.Duration) {
	s.mu.Lock()
	var stopping []*asynq.Server
	for _, l := range s.lanes {
		if !l.extras.Load() || l.running.Load() > 0 || time.Since(time.Unix(0, l.last.Load())) < linger {
			continue
		}
		stopping = append(stopping, s.take(func(name string) bool { return isExtra(name, l) })...)
		l.extras.Store(false)
	}
	s.mu.Unlock()
	shutdownAll(stopping)
}

// isExtra reports whether the Server named name is one of lane l's after
// its first.
func isExtra(name string, l *laneLoops) bool {
	rest, ok := strings.CutPrefix(name, l.region+"/"+l.lane+"/")
	return ok && rest != "0"
}

// take removes the Servers whose names match, s.mu held, and returns
// them to be shut down.
func (s *servers) take(match func(string) bool) []*asynq.Server {
	var out []*asynq.Server
	for name, srv := range s.byName {
		if match(name) {
			delete(s.byName, name)
			out = append(out, srv)
		}
	}
	return out
}

// shutdownAll shuts srvs down side by side; each finishes the tasks it
// runs (at most ShutdownTimeout) and, idle, waits for its dequeue loop's
// sleep.
func shutdownAll(srvs []*asynq.Server) {
	var wg sync.WaitGroup
	for _, srv := range srvs {
		wg.Go(srv.Shutdown)
	}
	wg.Wait()
}

// stop stops region's Servers (its lanes' and its legacy one) and its
// dispatcher.
func (s *servers) stop(region string) {
	inRegion := func(name string) bool { r, _, _ := strings.Cut(name, "/"); return r == region }
	s.mu.Lock()
	stopping := s.take(inRegion)
	maps.DeleteFunc(s.lanes, func(name string, _ *laneLoops) bool { return inRegion(name) })
	s.mu.Unlock()
	shutdownAll(stopping)
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
// waits for that sleep), the second of them every quickLoopPoll (50 tries
// a second, one command each, while its lane is busy), forward due tasks
// every extraLoopForward, and stop once the lane has run nothing for
// extraLoopLinger.
const (
	quickLoopPoll    = 20 * time.Millisecond
	extraLoopPoll    = 500 * time.Millisecond
	extraLoopForward = 5 * time.Second
	extraLoopLinger  = time.Minute
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
	s := &servers{w: w, shards: layout.Shards, byName: map[string]*asynq.Server{}, lanes: map[string]*laneLoops{}}
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
		// hooklane keeps no completed task (no asynq.Retention): the
		// janitor, which deletes expired ones, has nothing to do.
		JanitorInterval: time.Minute,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          asynqLogger{cfg.Logger},
		LogLevel:        asynq.WarnLevel,
	}
}
