package loadtest

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// QueueSample is the queue's backlog at one moment.
type QueueSample struct {
	T       float64 `json:"t"` // seconds since the scenario started
	Pending int64   `json:"pending"`
	Active  int64   `json:"active"`
	Later   int64   `json:"later"` // scheduled + retry + parked: paced, held or backing off
	// handedOut counts hand-outs not taken by a run yet; most are also
	// queued, so it is not added to the backlog, only waited out.
	handedOut int64
}

// Backlog is everything not yet settled.
func (q QueueSample) Backlog() int64 { return q.Pending + q.Active + q.Later }

// sampler reads the backlog of a scenario's stock every second with one
// pipelined round trip of four commands per queue (asynq's own key
// layout) and two per subscriber, so that its share of the Redis counters
// is known and small.
type sampler struct {
	mu      sync.Mutex
	samples []QueueSample
}

func (s *sampler) run(ctx context.Context, rdb redis.UniversalClient, where func() stock, start time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if q, err := backlog(ctx, rdb, where()); err == nil {
			q.T = time.Since(start).Seconds()
			s.mu.Lock()
			s.samples = append(s.samples, q)
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) get() []QueueSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]QueueSample(nil), s.samples...)
}

// backlog sums the backlog of st.
func backlog(ctx context.Context, rdb redis.UniversalClient, st stock) (QueueSample, error) {
	cmds := make([][4]*redis.IntCmd, len(st.queues))
	var lots, outs []*redis.IntCmd
	_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, q := range st.queues {
			p, a, sc, r := tasks.AsynqQueueKeys(q)
			cmds[i] = [4]*redis.IntCmd{pl.LLen(ctx, p), pl.LLen(ctx, a), pl.ZCard(ctx, sc), pl.ZCard(ctx, r)}
		}
		for _, k := range st.lots {
			lots = append(lots, pl.ZCard(ctx, k))
		}
		for _, k := range st.outs {
			outs = append(outs, pl.ZCard(ctx, k))
		}
		return nil
	})
	var s QueueSample
	for _, c := range cmds {
		s.Pending += c[0].Val()
		s.Active += c[1].Val()
		s.Later += c[2].Val() + c[3].Val()
	}
	for _, c := range lots {
		s.Later += c.Val()
	}
	for _, c := range outs {
		s.handedOut += c.Val()
	}
	return s, err
}
