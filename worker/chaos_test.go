package worker_test

// The chaos run of issue 32 (TestChaos); its plan, receiver, report and
// look into Redis are in chaos*_test.go.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// chaosEnv is the workers' configuration beyond crashEnv: two dequeue
// loops per lane and 50 handlers (the defaults are 8 and 200), which
// carry the run's load with less idle polling on two shared cores.
var chaosEnv = []string{"HOOKLANE_DEQUEUE_LOOPS=2", "HOOKLANE_CONCURRENCY=50"}

// TestChaos is issue 32's chaos run: three `hooklane worker` processes on
// one redis-server (AOF on), forty subscribers of mixed kinds on
// 127.0.0.1, events published through the producer SDK while a random
// worker is killed with kill -9 and restarted every 5-15 s and Redis is
// killed and restarted once; then the drain, and the checks: every event
// delivered (0 lost, 0 dead), no request before a Retry-After deadline,
// every delivery record final, nothing left to run, no endpoint with more
// requests in flight than its max_in_flight. Duplicates and the rescuer's
// counts are reported. HOOKLANE_CHAOS=full is make chaos' size.
func TestChaos(t *testing.T) {
	testkit.Heavy(t, "three worker processes killed and a redis-server restarted for half a minute")
	size, seed := chaosSizeFromEnv(t), chaosSeed(t)
	rng := rand.New(rand.NewPCG(seed, 32))
	began := time.Now()
	ctx := context.Background()
	r, ropts := startChaosRedis(t)
	t.Cleanup(func() { r.Stop() }) // the last one started: a restart replaces r
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 32})
	t.Cleanup(func() { rdb.Close() })
	ns := testkit.Namespace("chaos-")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	eps := chaosEndpoints(size)
	var subs []string
	for _, e := range eps {
		e.serve(t, seed)
		if _, err := p.PutSubscriber(ctx, chaosSubscriber(e)); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, e.id)
	}
	ws := &chaosWorkers{url: r.URL, ns: ns}
	for i := range ws.slots {
		ws.start(t, i)
	}
	plan := chaosPlan(eps, size.events)
	t.Logf("chaos run %s, seed %d (HOOKLANE_CHAOS_SEED repeats it): %d events to %d subscribers over %s, Redis in %s",
		size.name, seed, len(plan), len(eps), size.span, r.Dir)

	// The chaos: the publisher runs on its schedule; this goroutine kills.
	start := time.Now()
	pub := publishPlan(p, plan, size.span*9/10)
	t.Cleanup(func() { pub.stop.Store(true); <-pub.done })
	end := start.Add(size.span)
	redisAt := start.Add(time.Duration(float64(size.span) * (0.3 + 0.4*rng.Float64())))
	between := func() time.Duration {
		return size.killMin + time.Duration(rng.Int64N(int64(size.killMax-size.killMin)+1))
	}
	nextKill := start.Add(between())
	var actions []string
	kills, redisDown := 0, time.Duration(0)
	at := func() string {
		return fmt.Sprintf("+%.1fs (%s)", time.Since(start).Seconds(), time.Now().Format("15:04:05.000"))
	}
	for {
		next := nextKill
		if end.Before(next) {
			next = end
		}
		if redisDown == 0 && redisAt.Before(next) {
			next = redisAt
		}
		if !next.Before(end) {
			break
		}
		time.Sleep(time.Until(next)) // the schedule
		if redisDown == 0 && !redisAt.After(next) {
			when := at()
			r.Kill()
			down := time.Now()
			time.Sleep(time.Second) // down for a second
			if r, err = deploy.StartRedis(ctx, ropts); err != nil {
				t.Fatal(err)
			}
			redisDown = time.Since(down)
			actions = append(actions, fmt.Sprintf("%s Redis kill -9, back on its AOF after %.1fs", when, redisDown.Seconds()))
			continue
		}
		i := rng.IntN(len(ws.slots))
		when, pid := at(), ws.slots[i].cmd.Process.Pid
		ws.slots[i].kill()
		ws.start(t, i)
		kills++
		actions = append(actions, fmt.Sprintf("%s kill -9 worker %d (pid %d; pid %d started)", when, i, pid, ws.slots[i].cmd.Process.Pid))
		nextKill = time.Now().Add(between())
	}
	time.Sleep(time.Until(end))
	if !testkit.Poll(time.Minute, func() bool { return isClosed(pub.done) }) {
		t.Fatalf("the publisher is still publishing a minute after the chaos: %d of %d acknowledged", pub.acked.Load(), len(plan))
	}

	// The drain.
	drainStart := time.Now()
	if size.shorten {
		for _, w := range ws.slots {
			w.kill()
		}
		testkit.Eventually(t, 10*time.Second, "nothing in flight at the receiver and every Retry-After deadline passed", func() bool {
			for _, e := range eps {
				if tl := e.tally(); tl.inFlight > 0 || time.Now().Before(tl.lastDeadline) {
					return false
				}
			}
			return true
		})
		shortenRecovery(t, rdb, insp, ns, subs, 2*time.Minute+5*time.Second)
		for i := range ws.slots {
			ws.start(t, i)
		}
		actions = append(actions, fmt.Sprintf("%s every worker killed, leases moved back, three started", at()))
	}
	var states []string
	ended, moved := -1, time.Now()
	testkit.PollEvery(size.drain, size.poll, func() bool {
		if states, err = recordStates(ctx, rdb, ns, plan); err != nil {
			return false
		}
		n := 0
		for _, s := range states {
			if final(s) {
				n++
			}
		}
		if n != ended {
			ended, moved = n, time.Now()
		}
		return n == len(plan) || time.Since(moved) > size.idle && testkit.Settled(t, rdb, insp, ns)
	})
	drained := time.Since(drainStart)
	if states, err = recordStates(ctx, rdb, ns, plan); err != nil {
		t.Fatal(err)
	}
	settled := testkit.Poll(5*time.Second, func() bool { return testkit.Settled(t, rdb, insp, ns) })
	if !settled {
		if until, ok := deferredCopies(insp, ns); ok {
			// Only copies of deliveries another run owned are left, each due
			// when that run's slot ends: they run then and drop. Wait for them.
			t.Logf("waiting %.1fs for copies deferred behind a live run", time.Until(until).Seconds())
			settled = testkit.Poll(time.Until(until)+5*time.Second, func() bool { return testkit.Settled(t, rdb, insp, ns) })
		}
	}
	c := countChaos(eps, plan, states)
	c.kills, c.redisDown, c.actions, c.drained, c.settled = kills, redisDown, actions, drained, settled
	if !settled {
		c.leftover = testkit.Leftover(ctx, rdb, insp, ns)
	}
	c.refused, c.late = pub.refused.Load(), time.Duration(pub.late.Load())*time.Millisecond
	c.rescued = rescuedCounts(ctx, rdb, ns)
	c.took, c.cpu = time.Since(began), cpuTimes()
	report := c.String(size, seed, start)
	if len(c.stuck) > 0 {
		stuck := stuckReport(ctx, rdb, insp, ns, c.stuck, c.hits, ws.logsAbout, 5)
		t.Errorf("%d deliveries not final %s after the chaos: the report says where each is stuck", len(c.stuck), drained.Round(time.Second))
		report += "\n" + stuck
	}
	for _, d := range c.dead[:min(len(c.dead), 10)] {
		// Why it died: its attempts and the last errors are in its record.
		report += fmt.Sprintf("\ndead %s/%s: %s", d.sub, d.event, recordFields(rdb.HGetAll(ctx, tasks.Keys(ns).Delivery(d.sub, d.event)).Val()))
	}
	t.Log(report)
	if out := os.Getenv("HOOKLANE_CHAOS_OUT"); out != "" {
		if err := os.MkdirAll(out, 0o755); err == nil {
			err = os.WriteFile(filepath.Join(out, "summary-"+size.name+".txt"), []byte(report+"\n"), 0o644)
		}
		if err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
	c.check(t, pub)
}

// startChaosRedis starts the run's redis-server with AOF and appendfsync
// always: Redis writes and fsyncs each write to the AOF before it
// answers, so its kill -9 loses no acknowledged write, the publishes' nor
// a worker's, and the checks need no reasoning about the second an
// everysec fsync may lose (which a Redis process' death alone would not
// lose either: the page cache keeps it; only the host's would). Its data
// is on tmpfs when the machine has one (/dev/shm), where an fsync costs
// nothing: the run tests hooklane across a Redis restart, not the disk.
func startChaosRedis(t testing.TB) (*deploy.Redis, deploy.RedisOpts) {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "hooklane-chaos-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	port, err := deploy.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	opts := deploy.RedisOpts{Dir: dir, Port: port, AppendOnly: true, Args: []string{"--appendfsync", "always"}}
	r, err := deploy.StartRedis(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, opts
}

// chaosWorkers are the run's three worker slots and every process that
// filled one, whose logs the stuck deliveries' report searches.
type chaosWorkers struct {
	url, ns string
	slots   [3]*proc
	all     []*proc
}

func (w *chaosWorkers) start(t testing.TB, i int) {
	t.Helper()
	w.slots[i] = startProc(t, w.url, w.ns, chaosEnv...)
	w.all = append(w.all, w.slots[i])
}

// logsAbout is every worker's log lines that name event.
func (w *chaosWorkers) logsAbout(event string) []string {
	var out []string
	for _, p := range w.all {
		for line := range strings.SplitSeq(p.log.String(), "\n") {
			if strings.Contains(line, event) {
				out = append(out, fmt.Sprintf("pid %d: %s", p.cmd.Process.Pid, line))
			}
		}
	}
	return out
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// cpuTimes is the CPU this test process and its children that ended (the
// killed workers, the killed Redis) used, for the report.
func cpuTimes() string {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	cpu := func(ru syscall.Rusage) float64 { return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds() }
	return fmt.Sprintf("this process %.1fs, its ended children %.1fs", cpu(self), cpu(kids))
}
