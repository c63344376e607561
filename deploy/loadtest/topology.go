package loadtest

import (
	"context"
	"fmt"
	"strings"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/tasks"
)

// Topology is what a run ran on, so that its figures are read against it.
type Topology struct {
	// Redis is deploy.RedisConfig's mode: single, cluster or sentinel.
	Redis string `json:"redis"`
	// Started: the harness started that Redis (or Cluster) for the run.
	Started bool `json:"started_by_harness"`
	// Masters are the masters whose counters the Redis figures sum.
	Masters []string `json:"masters"`
	// Workers is the number of worker processes each scenario runs;
	// WorkerMode is subprocess, in-process or external.
	Workers    int    `json:"workers"`
	WorkerMode string `json:"worker_mode"`
	// Shards is the queue count per lane asked for (HOOKLANE_QUEUE_SHARDS;
	// 0: the namespace's default). Each scenario reports the count its
	// namespace has (ScenarioReport.QueueShards).
	Shards int `json:"shards_requested"`
	// FloorServers is the asynq Server count of the second floor (1: no
	// second floor). The floor always runs as one process.
	FloorServers int `json:"floor_servers"`
}

// topology reads the masters of the run's Redis.
func (e *env) topology(ctx context.Context, started bool) (Topology, error) {
	s, err := e.redisSnapshot(ctx)
	if err != nil {
		return Topology{}, err
	}
	n := e.cfg.Workers
	if e.cfg.ExternalWorkers {
		n = 0
	}
	return Topology{Redis: e.cfg.Redis.Mode(), Started: started, Masters: s.nodeAddrs(), Workers: n,
		WorkerMode: workerMode(e.cfg), Shards: e.cfg.Worker.Shards, FloorServers: e.cfg.FloorServers}, nil
}

// shardsOf is the queue count per lane namespace ns has (0 if unreadable).
func (e *env) shardsOf(ctx context.Context, ns string) int {
	n, _ := e.rdb.HGet(ctx, tasks.Keys(ns).Layout(), "shards").Int()
	return n
}

// String is the topology in one line of the summary.
func (t Topology) String() string {
	var b strings.Builder
	switch t.Redis {
	case deploy.ModeCluster:
		fmt.Fprintf(&b, "Redis Cluster, %d masters", len(t.Masters))
	case deploy.ModeSentinel:
		b.WriteString("Redis behind Sentinel")
	default:
		b.WriteString("one Redis")
	}
	if t.Started {
		b.WriteString(" (started by the harness)")
	}
	switch {
	case t.WorkerMode == "external":
		b.WriteString("; external workers")
	case t.Workers == 1:
		fmt.Fprintf(&b, "; 1 worker (%s)", t.WorkerMode)
	default:
		fmt.Fprintf(&b, "; %d workers (%s)", t.Workers, t.WorkerMode)
	}
	if t.Shards == 0 {
		b.WriteString("; shards per lane: the namespace's default")
	} else {
		fmt.Fprintf(&b, "; shards per lane: %d", t.Shards)
	}
	if t.FloorServers > 1 {
		fmt.Fprintf(&b, "; floor: one process with 1 asynq Server, and one with %d", t.FloorServers)
	} else {
		b.WriteString("; floor: one process with 1 asynq Server")
	}
	return b.String()
}
