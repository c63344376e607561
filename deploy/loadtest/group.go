package loadtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// group is the processes that deliver in one scenario or round: the
// Config.Workers workers, or the floor.
type group []*proc

// ProcStats is one worker or floor process's share of a scenario or round.
type ProcStats struct {
	Name string `json:"name"`
	// PeakRSSMiB (VmHWM) and CPUSeconds (user + system) are a
	// subprocess's own; 0 for one in this process.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	CPUSeconds float64 `json:"cpu_s"`
	// Delivered counts the 2xx answers the process got, from an in-process
	// worker's worker.Stats; absent for a subprocess (its CPU shows its
	// share) and the floor.
	Delivered *int64 `json:"delivered,omitempty"`
}

// startWorkers starts Config.Workers workers on namespace ns (none with
// ExternalWorkers: a group of one placeholder that reads no figures).
func (e *env) startWorkers(ctx context.Context, ns string) (group, error) {
	n := e.cfg.Workers
	if e.cfg.ExternalWorkers {
		n = 1
	}
	var g group
	for i := range n {
		p, err := e.startWorker(ctx, ns, i+1)
		if err != nil {
			_, serr := g.Stop()
			return nil, errors.Join(err, serr)
		}
		g = append(g, p)
	}
	// A publish parks what it would hand to asynq at once until a worker
	// serves the region (producer/serving.go): a scenario's phases start
	// with its workers serving.
	served := tasks.Keys(ns).Serving("")
	if !e.cfg.ExternalWorkers && !waitFor(ctx, e.cfg.Timeout, func() bool { return e.rdb.Exists(ctx, served).Val() == 1 }) {
		_, serr := g.Stop()
		return nil, errors.Join(fmt.Errorf("no worker served the namespace's region within %s", e.cfg.Timeout), serr)
	}
	return g, nil
}

// CPU is the CPU time the group's subprocesses have used so far.
func (g group) CPU() time.Duration {
	var d time.Duration
	for _, p := range g {
		d += p.CPU()
	}
	return d
}

// stats are each process's figures now.
func (g group) stats() []ProcStats {
	out := make([]ProcStats, len(g))
	for i, p := range g {
		out[i] = ProcStats{Name: p.name, PeakRSSMiB: mib(p.PeakRSS()), CPUSeconds: p.CPU().Seconds()}
		if p.delivered != nil {
			n := p.delivered()
			out[i].Delivered = &n
		}
	}
	return out
}

// Stop stops every process of the group at once and returns their peak
// RSS, read just before, in bytes.
func (g group) Stop() ([]int64, error) {
	rss := make([]int64, len(g))
	errs := make([]error, len(g))
	var wg sync.WaitGroup
	for i, p := range g {
		wg.Go(func() { rss[i], errs[i] = p.Stop() })
	}
	wg.Wait()
	return rss, errors.Join(errs...)
}

// withPeaks returns stats with each process's peak RSS raised to rss (read
// at Stop, after stats).
func withPeaks(stats []ProcStats, rss []int64) []ProcStats {
	for i := range stats {
		if i < len(rss) {
			stats[i].PeakRSSMiB = max(stats[i].PeakRSSMiB, mib(rss[i]))
		}
	}
	return stats
}

// sumRSS is the group's peak RSS: the sum of each process's peak.
func sumRSS(stats []ProcStats) float64 {
	var s float64
	for _, p := range stats {
		s += p.PeakRSSMiB
	}
	return s
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
