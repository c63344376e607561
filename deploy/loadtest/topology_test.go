package loadtest

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// tinyThroughput runs the throughput scenario alone at a small size with
// in-process workers and returns its report, having checked what every
// run must keep: nothing lost, no invariant broken, nothing hidden.
func tinyThroughput(t *testing.T, cfg Config) (*Report, *ScenarioReport) {
	t.Helper()
	cfg.Out = t.TempDir()
	cfg.Scenarios = []string{ScenarioThroughput}
	cfg.Timeout = 60 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rep := runLogged(t, 2*time.Minute, cfg)
	r := scenario(t, rep, ScenarioThroughput)
	for _, f := range r.Failures {
		t.Errorf("invariant broken: %s", f)
	}
	for _, h := range r.Hiding {
		t.Errorf("invalid in a way that could hide a broken invariant: %s", h)
	}
	if r.Published == 0 || r.Lost != 0 || r.Duplicates != 0 || r.Published != r.Delivered {
		t.Errorf("published %d, delivered %d, lost %d, duplicates %d: want every event delivered once",
			r.Published, r.Delivered, r.Lost, r.Duplicates)
	}
	tp := r.Throughput
	if tp == nil || tp.Floor.Deliveries != tp.Tasks || tp.Hooklane.Deliveries != tp.Tasks {
		t.Fatalf("throughput %+v: want %d deliveries on each path", tp, cfg.Throughput.Subscribers*cfg.Throughput.Events)
	}
	return rep, r
}

// Two workers on a namespace of two shards per lane (and a second floor of
// two Servers) deliver the backlog between them: every event once, the
// invariants kept, each worker a share of the deliveries, the namespace
// created with the shards asked for, and the report saying so.
func TestTwoWorkersOnTwoShards(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	t.Parallel()
	const subs, events, shards = 4, 100, 2
	used := map[int]bool{}
	for i := range subs {
		used[tasks.Shard(fmt.Sprintf("tput-%02d", i), shards)] = true
	}
	if len(used) != shards {
		t.Fatalf("the subscribers use shards %v of %d: the test would not spread tasks over every shard", used, shards)
	}
	rep, r := tinyThroughput(t, Config{Workers: 2, FloorServers: 2, Worker: worker.Config{Shards: shards},
		Throughput: &ThroughputSpec{Subscribers: subs, Events: events}})
	if top := rep.Topology; top.Workers != 2 || top.Shards != shards || top.FloorServers != 2 || top.Redis != deploy.ModeSingle || len(top.Masters) != 1 {
		t.Errorf("topology %+v", top)
	}
	if r.QueueShards != shards {
		t.Errorf("the namespace has %d shards per lane, want %d", r.QueueShards, shards)
	}
	tp := r.Throughput
	for _, pr := range tp.HooklaneRounds {
		if len(pr.Processes) != 2 {
			t.Fatalf("hooklane round with processes %+v, want 2 workers", pr.Processes)
		}
		var sum int64
		for _, p := range pr.Processes {
			if p.Delivered == nil || *p.Delivered == 0 {
				t.Errorf("worker %s delivered %v of the round's %d: it took no part", p.Name, p.Delivered, tp.Tasks)
				continue
			}
			sum += *p.Delivered
		}
		if sum != int64(tp.Tasks) {
			t.Errorf("the workers delivered %d together, want the round's %d", sum, tp.Tasks)
		}
	}
	if tp.FloorMulti == nil || tp.FloorMulti.Deliveries != tp.Tasks || len(tp.FloorMultiRounds) != 1 || tp.RatioMulti <= 0 {
		t.Errorf("floor of 2 Servers %+v (rounds %d, ratio %.2f): want one round of %d deliveries", tp.FloorMulti, len(tp.FloorMultiRounds), tp.RatioMulti, tp.Tasks)
	}
	if len(r.Workers) != 2 {
		t.Errorf("scenario workers %+v, want 2", r.Workers)
	}
	if tp.CPURatio != 0 {
		t.Errorf("CPU ratio %.2f in-process, where the servers' CPU is unknown: want none", tp.CPURatio)
	}
}

// On a Cluster the harness starts, the namespace gets the Cluster's
// default shards and the Redis figures are the sums over every master,
// each master listed with its share.
func TestClusterRunSumsEveryMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	t.Parallel()
	rep, r := tinyThroughput(t, Config{Cluster: true, Throughput: &ThroughputSpec{Subscribers: 3, Events: 100}})
	if top := rep.Topology; top.Redis != deploy.ModeCluster || !top.Started || len(top.Masters) != ClusterMasters {
		t.Fatalf("topology %+v, want a started Cluster of %d masters", top, ClusterMasters)
	}
	if r.QueueShards != deploy.ClusterShards {
		t.Errorf("the namespace has %d shards per lane, want the Cluster default %d", r.QueueShards, deploy.ClusterShards)
	}
	tp := r.Throughput
	for _, p := range []struct {
		name string
		c    RedisCost
	}{{"floor", tp.Floor.Redis}, {"hooklane", tp.Hooklane.Redis}} {
		if len(p.c.Masters) != ClusterMasters {
			t.Errorf("%s: Redis figures of %d masters %+v, want %d", p.name, len(p.c.Masters), p.c.Masters, ClusterMasters)
			continue
		}
		var cmds, rts, cpu, busy float64
		for _, m := range p.c.Masters {
			cmds, rts, cpu = cmds+m.CommandsPerDelivery, rts+m.RoundTripsPerDelivery, cpu+m.CPUUsecPerDelivery
			if m.CommandsPerDelivery >= 1 {
				busy++
			}
		}
		if math.Abs(cmds-p.c.CommandsPerDelivery) > 1e-6 || math.Abs(rts-p.c.RoundTripsPerDelivery) > 1e-6 || math.Abs(cpu-p.c.CPUUsecPerDelivery) > 1e-6 {
			t.Errorf("%s: masters sum to %.3f commands, %.3f round trips, %.1f µs CPU per delivery; the figures say %.3f, %.3f, %.1f",
				p.name, cmds, rts, cpu, p.c.CommandsPerDelivery, p.c.RoundTripsPerDelivery, p.c.CPUUsecPerDelivery)
		}
		// A delivery costs at least asynq's dequeue and completion (the
		// floor's 14 commands, 13.96 once an idle worker polls less;
		// hooklane's share round trips, so they are counted by command),
		// whichever master has its queue: 12 leaves room for fewer polls,
		// a master's counters missing would take a third off.
		if p.c.CommandsPerDelivery < 12 {
			t.Errorf("%s: %.2f commands per delivery: a master's counters are missing", p.name, p.c.CommandsPerDelivery)
		}
		if p.name == "hooklane" && busy < 2 {
			t.Errorf("hooklane: %.0f masters did a command per delivery or more %+v: its queues and subscribers' keys should spread", busy, p.c.Masters)
		}
	}
}
