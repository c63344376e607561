package deploy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// AutoPipeline returns a client on the same Redis as c (same options, a
// pool of its own) whose commands share round trips: while two batches are
// on their way to Redis, the commands and pipelines that concurrent
// goroutines send wait, and go together in the next. A lone command goes
// at once, so an idle process pays no delay; a busy one pays one round
// trip per batch instead of one per command (each round trip is a write
// and a read on both ends, most of a small command's cost), and Redis runs
// one batch while the process reads the other's replies. Each command
// keeps its own reply and error; a batch whose round trip fails fails
// each of its commands, as their own round trips would have.
//
// No goroutine of its own: a caller that finds fewer than two batches on
// their way sends one, and when it is back hands the lead to the first
// that queued meanwhile. MULTI/EXEC pipelines go alone. The client must
// not be used for WATCH: a command in a transaction's callback would be
// sent on another connection. hooklane gives it to asynq (its Lua scripts:
// dequeue, done, enqueue) and to the delivery gates, which use neither.
func AutoPipeline(c redis.UniversalClient) (redis.UniversalClient, error) {
	var out redis.UniversalClient
	switch c := c.(type) {
	case *redis.ClusterClient:
		o := *c.Options()
		unresolveCluster(&o)
		out = redis.NewClusterClient(&o)
	case *redis.Client: // one server, or Sentinel's failover client (its dialer asks the sentinels)
		o := *c.Options()
		unresolve(&o)
		out = redis.NewClient(&o)
	default:
		return nil, errors.New("deploy: AutoPipeline takes a *redis.Client or a *redis.ClusterClient")
	}
	out.AddHook(&autoPipe{rdb: out})
	return out, nil
}

// unresolve turns options go-redis has resolved back into what resolves to
// them again, for a client of its own: a client's Options() reads 0 where it was given -1 (no
// retries, no timeout), and a 0 given to a new client means the default
// (3 retries, 5 s).
func unresolve(o *redis.Options) {
	// A client writes its own push-notification processor into its
	// options; shared, the new client could not register its handlers.
	// Its maintenance-notification settings it changes as its connections
	// start (under a lock of its own): the new client takes the defaults
	// instead of reading them meanwhile (hooklane sets neither).
	o.PushNotificationProcessor = nil
	o.MaintNotificationsConfig = nil
	o.MaxRetries = cmpNone(o.MaxRetries)
	o.ReadTimeout, o.WriteTimeout = timeout(o.ReadTimeout), timeout(o.WriteTimeout)
	o.MinRetryBackoff, o.MaxRetryBackoff = cmpNone(o.MinRetryBackoff), cmpNone(o.MaxRetryBackoff)
}

// unresolveCluster is unresolve for a Cluster's options (whose MaxRetries
// keeps -1 as given).
func unresolveCluster(o *redis.ClusterOptions) {
	o.MaintNotificationsConfig = nil
	o.ReadTimeout, o.WriteTimeout = timeout(o.ReadTimeout), timeout(o.WriteTimeout)
	o.MinRetryBackoff, o.MaxRetryBackoff = cmpNone(o.MinRetryBackoff), cmpNone(o.MaxRetryBackoff)
}

// cmpNone is -1 for a resolved 0 ("none"), v otherwise.
func cmpNone[T ~int | ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// timeout is the value that resolves to the resolved timeout d: 0 (none)
// from -1, -1 (no deadline set at all) from -2.
func timeout(d time.Duration) time.Duration {
	switch d {
	case 0:
		return -1
	case -1:
		return -2
	}
	return d
}

type sendingKey struct{}

// inFlight is how many batches may be on their way at once: while Redis
// runs one, the process reads the last one's replies and gathers the
// next, and Redis is not left idle between them.
const inFlight = 2

// autoPipe is AutoPipeline's hook.
type autoPipe struct {
	rdb   redis.UniversalClient
	mu    sync.Mutex
	busy  int  // batches on their way (at most inFlight)
	led   bool // a waiting caller was handed the lead and has not taken the queue yet
	queue []*batched
}

// batched is one caller's commands in a batch.
type batched struct {
	cmds []redis.Cmder
	done chan struct{} // closed once they are answered
	lead chan struct{} // this caller is to send the next batch
}

func (a *autoPipe) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a *autoPipe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(sendingKey{}) != nil {
			return next(ctx, cmd)
		}
		return a.join(ctx, []redis.Cmder{cmd})
	}
}

func (a *autoPipe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(sendingKey{}) != nil || len(cmds) == 0 || cmds[0].Name() == "multi" {
			return next(ctx, cmds)
		}
		return a.join(ctx, cmds)
	}
}

// join sends cmds in a batch and returns the first one's error. Up to
// inFlight batches are on their way at once; a caller that finds them all
// out waits in the queue until its commands went with another's batch, or
// until a sender coming back hands it the lead (led: one caller at a time
// holds a handed lead, and takes the whole queue).
func (a *autoPipe) join(ctx context.Context, cmds []redis.Cmder) error {
	b := &batched{cmds: cmds, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	a.mu.Lock()
	a.queue = append(a.queue, b)
	if a.busy >= inFlight {
		a.mu.Unlock()
		select {
		case <-b.lead:
		case <-b.done:
			// Sent in another sender's batch; a lead handed before that
			// sender took the queue must still be taken up.
			select {
			case <-b.lead:
			default:
				return firstErr(cmds)
			}
		}
		a.mu.Lock()
		a.led = false
	} else {
		a.busy++
	}
	batch := a.queue
	a.queue = nil
	a.mu.Unlock()

	if len(batch) > 0 {
		a.send(ctx, batch)
	}

	a.mu.Lock()
	if len(a.queue) > 0 && !a.led {
		a.led = true
		a.queue[0].lead <- struct{}{}
	} else {
		a.busy--
	}
	a.mu.Unlock()
	<-b.done // b was in this batch or another's
	return firstErr(cmds)
}

// send runs batch in one pipeline and closes each caller's done. The
// commands belong to others too: the leader's cancellation must not fail
// them (the client's timeouts still bound the round trip).
func (a *autoPipe) send(ctx context.Context, batch []*batched) {
	defer func() {
		for _, b := range batch {
			close(b.done)
		}
	}()
	ctx = context.WithValue(context.WithoutCancel(ctx), sendingKey{}, true)
	_, _ = a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, b := range batch {
			for _, cmd := range b.cmds {
				_ = p.Process(ctx, cmd)
			}
		}
		return nil
	})
}

func firstErr(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}
