package loadtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// The warm-up subscriber, the floor's endpoint for it and its event
// type: each round's server delivers one event there before the round's
// schedule starts.
const (
	trickleWarmID      = "trickle-warmup"
	trickleFloorWarmID = "floor-trickle-warmup"
	trickleWarmType    = "bench.trickle.warmup"
)

// tricklePath is how one path runs a round.
type tricklePath struct {
	gen    *Generator              // publishes the schedule
	warm   func(tasks.Event) error // publishes the warm-up event
	ids    []string                // the endpoints the schedule's events reach
	warmEP string                  // the endpoint the warm-up event reaches
	serve  func() (group, error)   // starts the server
	where  func() stock            // where its undelivered work sits
}

// trickleFloorRound is a round of the floor: the same schedule, each event
// enqueued as a plain floor task for its subscriber's floor endpoint.
func (e *env) trickleFloorRound(ctx context.Context, ts TrickleSpec, round int, ids []string, urls map[string]string) (PathResult, GenStats, error) {
	queue := e.namespace("floor-trickle")
	client := asynq.NewClientFromRedisClient(e.rdb)
	send := func(ctx context.Context, ev tasks.Event) error {
		ev.Timestamp = time.Now().UTC().Truncate(time.Second)
		body, _ := json.Marshal(ev) // what hooklane sends: {id, type, timestamp, data}
		payload, _ := json.Marshal(FloorPost{URL: urls[ev.Type], Body: body})
		_, err := client.EnqueueContext(ctx, asynq.NewTask(TypeFloorPost, payload, asynq.Queue(queue)))
		return err
	}
	return e.trickleRound(ctx, ts, fmt.Sprintf("ftr%d", round), tricklePath{
		gen: &Generator{Send: send}, warm: func(ev tasks.Event) error { return send(ctx, ev) }, ids: ids, warmEP: trickleFloorWarmID,
		serve: func() (group, error) {
			p, err := e.startFloor(ctx, queue, 1)
			if err != nil {
				return nil, err
			}
			return group{p}, nil
		},
		where: func() stock { return onlyQueues(queue) },
	})
}

// trickleHooklaneRound is a round of hooklane: the schedule published
// through the producer, delivered by the workers.
func (e *env) trickleHooklaneRound(ctx context.Context, ts TrickleSpec, round int, ns string, p *producer.Producer, led *Ledger, ids []string) (PathResult, GenStats, error) {
	return e.trickleRound(ctx, ts, fmt.Sprintf("tr%d", round), tricklePath{
		gen: &Generator{P: p, Ledger: led}, ids: ids, warmEP: trickleWarmID,
		warm: func(ev tasks.Event) error {
			_, err := p.Publish(ctx, ev, nil)
			return err
		},
		serve: func() (group, error) { return e.startWorkers(ctx, ns) },
		where: func() stock { return e.stockOf(ctx, ns) },
	})
}

// trickleRound starts path's server and waits for it to deliver a warm-up
// event: the schedule starts once the server delivers, not while it
// starts (a subprocess' exec, its connections, asynq's first poll), when
// the first events would wait for it and make a backlog. Then it
// publishes the round's schedule while the server runs, and measures
// both: drain's Redis snapshots and CPU readings bracket the publishing
// as well as the deliveries (and the start and the warm-up, one event's
// worth, on both paths alike).
func (e *env) trickleRound(ctx context.Context, ts TrickleSpec, prefix string, path tricklePath) (PathResult, GenStats, error) {
	shots := trickleShots(prefix, ts.Subscribers, ts.Sweeps, ts.Rate)
	var wg sync.WaitGroup
	var gs GenStats
	start := func() (group, error) {
		g, err := path.serve()
		if err != nil {
			return nil, err
		}
		was := e.recv.Count(path.warmEP)
		err = path.warm(event(prefix+"-warmup", trickleWarmType, 0))
		if err == nil && !waitFor(ctx, e.cfg.Timeout, func() bool { return e.recv.Count(path.warmEP) > was }) {
			err = fmt.Errorf("%s did not deliver the warm-up event within %s", g[0].name, e.cfg.Timeout)
		}
		if err != nil {
			_, serr := g.Stop()
			return nil, errors.Join(err, serr)
		}
		wg.Go(func() { gs = path.gen.Run(ctx, time.Now(), shots, true) })
		return g, nil
	}
	pr, err := e.drain(ctx, start, path.ids, len(shots), path.where)
	wg.Wait()
	pr.Redis.IncludesPublishing = true
	return pr, gs, err
}

func subIDs(subs []subSpec) []string {
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.ID
	}
	return ids
}

// cpuMedian returns the round with the median CPU per delivery (the lower
// middle one of an even count), or with the median Redis CPU when the
// servers' is unknown (in-process): every round delivers at the publish
// rate, so the rate does not tell rounds apart.
func cpuMedian(rs []PathResult) PathResult {
	if len(rs) == 0 {
		return PathResult{}
	}
	s := append([]PathResult(nil), rs...)
	sort.Slice(s, func(i, j int) bool {
		return cmp.Or(s[i].CPU(), s[i].Redis.CPUUsecPerDelivery) < cmp.Or(s[j].CPU(), s[j].Redis.CPUUsecPerDelivery)
	})
	return s[(len(s)-1)/2]
}
