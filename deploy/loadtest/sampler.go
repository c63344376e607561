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
	Later   int64   `json:"later"` // scheduled + retry: paced, deferred or backing off
}

// Backlog is everything not yet settled.
func (q QueueSample) Backlog() int64 { return q.Pending + q.Active + q.Later }

// sampler reads the backlog of a scenario's queues every second with one
// pipelined round trip of four commands per queue (asynq's own key
// layout), so that its share of the Redis counters is known and small.
type sampler struct {
	mu      sync.Mutex
	samples []QueueSample
}

func (s *sampler) run(ctx context.Context, rdb redis.UniversalClient, queues func() []string, start time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if q, err := backlog(ctx, rdb, queues()); err == nil {
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

// backlog sums the backlog of queues.
func backlog(ctx context.Context, rdb redis.UniversalClient, queues []string) (QueueSample, error) {
	cmds := make([][4]*redis.IntCmd, len(queues))
	_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, q := range queues {
			p, a, sc, r := tasks.AsynqQueueKeys(q)
			cmds[i] = [4]*redis.IntCmd{pl.LLen(ctx, p), pl.LLen(ctx, a), pl.ZCard(ctx, sc), pl.ZCard(ctx, r)}
		}
		return nil
	})
	var s QueueSample
	for _, c := range cmds {
		s.Pending += c[0].Val()
		s.Active += c[1].Val()
		s.Later += c[2].Val() + c[3].Val()
	}
	return s, err
}
