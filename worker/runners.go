package worker

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/hibiken/asynq"
)

// runners runs the delivery handler on goroutines that outlive a task.
// asynq starts a new goroutine for every task, with a small stack that
// then grows, by copying, to the depth of a delivery (a Redis pipeline, an
// HTTP request, JSON) — 10% of the worker's CPU in a profile of the
// throughput benchmark. A runner's stack stays grown from one task to the
// next (until a garbage collection shrinks an idle one).
//
// ProcessTask hands the task to an idle runner, or starts one: there are
// never more runners than tasks running at once at the busiest, and none
// before the first task. close stops them once no task runs.
type runners struct {
	h     asynq.Handler
	jobs  chan job
	quit  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	idle  atomic.Int64 // runners waiting for a job, or about to
	count atomic.Int64 // runners started
}

type job struct {
	ctx  context.Context
	t    *asynq.Task
	done chan error
}

func newRunners(h asynq.Handler) *runners {
	return &runners{h: h, jobs: make(chan job), quit: make(chan struct{})}
}

// ProcessTask is asynq's Handler: it returns what the handler returns.
func (p *runners) ProcessTask(ctx context.Context, t *asynq.Task) error {
	j := job{ctx: ctx, t: t, done: make(chan error, 1)}
	for {
		n := p.idle.Load()
		if n == 0 {
			p.wg.Add(1)
			p.count.Add(1)
			go p.loop(j)
			break
		}
		if p.idle.CompareAndSwap(n, n-1) {
			// A runner counted itself idle before it answered its last task:
			// it is waiting for this one, or about to.
			select {
			case p.jobs <- j:
			case <-p.quit: // closed (asynq stopped already): run it here
				return p.h.ProcessTask(ctx, t)
			}
			break
		}
	}
	return <-j.done
}

// loop runs j, then whatever job comes, until close.
func (p *runners) loop(j job) {
	defer p.wg.Done()
	for {
		err := p.h.ProcessTask(j.ctx, j.t)
		p.idle.Add(1)
		j.done <- err
		select {
		case j = <-p.jobs:
		case <-p.quit:
			return
		}
	}
}

// close stops the idle runners and waits for them; call it once asynq's
// servers have stopped, so that no task is handed over any more.
func (p *runners) close() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}
