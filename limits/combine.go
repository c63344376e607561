package limits

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// combiner sends the gate scripts of concurrent deliveries together: while
// one pipeline is on its way to Redis, the calls that arrive wait, and go
// in the next one as a batch. A lone call goes at once, so an idle worker
// pays no delay; a busy one pays one round trip per batch instead of one
// per call (each round trip is a write and a read on both ends: most of a
// delivery's CPU is in them).
//
// No goroutine of its own: the caller that finds no batch on its way sends
// one (the leader), and when it is back hands the lead to the first call
// that queued meanwhile.
type combiner struct {
	rdb   redis.UniversalClient
	mu    sync.Mutex
	busy  bool // a batch is on its way
	queue []*scriptCall
}

// scriptCall is one call of a batch: a script, or (fill set) commands of
// any kind.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	res    []any
	// fill queues the call's commands on the batch's pipeline, instead of
	// a script; cmds are then those commands, sent, and err the first
	// one's error.
	fill func(p redis.Pipeliner)
	cmds []redis.Cmder
	err  error
	done chan struct{} // closed once res and err are set
	lead chan struct{} // this call is to send the next batch
}

// run runs script as part of a batch and returns its reply.
func (c *combiner) run(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]any, error) {
	call := &scriptCall{script: script, keys: keys, args: args}
	c.do(ctx, call)
	return call.res, call.err
}

// do sends calls as part of one batch and returns once they are answered.
// They share one lead: the caller waits for whichever comes first, its
// replies or its turn to send the next batch.
func (c *combiner) do(ctx context.Context, calls ...*scriptCall) {
	lead := make(chan struct{}, 1)
	for _, call := range calls {
		call.done, call.lead = make(chan struct{}), lead
	}
	last := calls[len(calls)-1] // answered last: send closes done in batch order
	c.mu.Lock()
	c.queue = append(c.queue, calls...)
	if c.busy {
		c.mu.Unlock()
		select {
		case <-last.done:
			return
		case <-lead:
		}
		c.mu.Lock()
	}
	c.busy = true
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()

	// The batch's calls belong to others too: the leader's cancellation
	// must not fail them (the client's timeouts still bound it).
	c.send(context.WithoutCancel(ctx), batch)

	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].lead <- struct{}{}
	} else {
		c.busy = false
	}
	c.mu.Unlock()
}

// send runs a batch's scripts in one pipeline (by their sha; those Redis
// does not know yet go again in full) and closes each call's done.
func (c *combiner) send(ctx context.Context, batch []*scriptCall) {
	defer func() {
		for _, call := range batch {
			close(call.done)
		}
	}()
	if len(batch) == 1 && batch[0].fill == nil {
		call := batch[0]
		call.res, call.err = call.script.Run(ctx, c.rdb, call.keys, call.args...).Slice()
		return
	}
	cmds := make([]*redis.Cmd, len(batch))
	spans := make([][2]int, len(batch)) // each fill's commands in all
	all, _ := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, call := range batch {
			if call.fill != nil {
				spans[i][0] = p.Len()
				call.fill(p)
				spans[i][1] = p.Len()
				continue
			}
			cmds[i] = call.script.EvalSha(ctx, p, call.keys, call.args...)
		}
		return nil
	})
	var again []int
	for i, cmd := range cmds {
		if call := batch[i]; call.fill != nil {
			call.cmds = all[spans[i][0]:spans[i][1]]
			for _, c := range call.cmds {
				if call.err = c.Err(); call.err != nil {
					break
				}
			}
			continue
		}
		batch[i].res, batch[i].err = cmd.Slice()
		if IsNoScript(batch[i].err) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range again {
			cmds[i] = batch[i].script.Eval(ctx, p, batch[i].keys, batch[i].args...)
		}
		return nil
	})
	for _, i := range again {
		batch[i].res, batch[i].err = cmds[i].Slice()
	}
}

// Pipelined sends the commands fill queues in the round trip of the gate
// scripts of concurrent deliveries (see combiner), and returns them sent
// and the first one's error, as redis' Pipelined does.
func (g *Gates) Pipelined(ctx context.Context, fill func(p redis.Pipeliner)) ([]redis.Cmder, error) {
	call := &scriptCall{fill: fill}
	g.comb.do(ctx, call)
	return call.cmds, call.err
}

// Call is one script call for Gates.RunScripts: Res and Err are its reply
// (the script must answer an array).
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
	Res    []any
	Err    error
}

// RunScripts runs calls in one pipeline, by their sha (a script Redis does
// not know yet goes again in full, the others are not run twice), and sets
// each one's reply.
func (g *Gates) RunScripts(ctx context.Context, calls []*Call) {
	batch := make([]*scriptCall, len(calls))
	for i, c := range calls {
		batch[i] = &scriptCall{script: c.Script, keys: c.Keys, args: c.Args, done: make(chan struct{})}
	}
	g.comb.send(ctx, batch)
	for i, c := range calls {
		c.Res, c.Err = batch[i].res, batch[i].err
	}
}

// IsNoScript reports whether err is Redis refusing a script by sha that it
// does not know (a first call, or after a restart or failover): the
// script did not run, and may be sent again in full.
func IsNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }
