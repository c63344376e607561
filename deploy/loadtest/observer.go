package loadtest

import (
	"context"
	"maps"
	"sync"

	"github.com/redis/go-redis/v9"
)

// observer counts the commands the harness itself sends to look at a
// scenario (its queue samples and the polls that wait for the queue to
// settle), so that the Redis figures per delivery are hooklane's: they
// are taken out of INFO's counters, which count every client's.
type observer struct {
	mu    sync.Mutex
	calls map[string]int64
	trips int64
}

// observerOf counts what rdb sends from now on.
func observerOf(rdb redis.UniversalClient) *observer {
	o := &observer{calls: map[string]int64{}}
	rdb.AddHook(o)
	return o
}

func (o *observer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *observer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		o.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (o *observer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		o.count(cmds)
		return next(ctx, cmds)
	}
}

// count adds one round trip of cmds (one per node on a Cluster is not
// told apart: a sample's commands go to every node, so its round trips
// are undercounted there, its commands not).
func (o *observer) count(cmds []redis.Cmder) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.trips++
	for _, c := range cmds {
		o.calls[c.Name()]++ // lower case, as INFO names it
	}
}

// snapshot is what was counted so far.
func (o *observer) snapshot() observed {
	if o == nil {
		return observed{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return observed{calls: maps.Clone(o.calls), trips: o.trips}
}

// observed is an observer's counts at one moment.
type observed struct {
	calls map[string]int64
	trips int64
}

// without is d less the harness' own commands sent between before and
// after: their calls and round trips, and each command's share of its
// time (every call of a command taken as costing alike). Redis' process
// CPU stays whole: the harness' reads are a few µs of it a delivery.
func (d redisStats) without(before, after observed) (redisStats, int64) {
	var n int64
	calls, usecBy := maps.Clone(d.Calls), maps.Clone(d.UsecBy)
	out := d
	for k, v := range after.calls {
		x := min(v-before.calls[k], calls[k])
		if x <= 0 {
			continue
		}
		share := usecBy[k] * x / calls[k]
		usecBy[k], out.Usec, calls[k] = usecBy[k]-share, out.Usec-share, calls[k]-x
		n += x
	}
	out.Calls, out.UsecBy = calls, usecBy
	out.Reads = max(d.Reads-(after.trips-before.trips), 0)
	if len(d.Nodes) == 1 { // one server: its figures are the sums'
		out.Nodes = map[string]redisStats{}
		for addr, node := range d.Nodes {
			out.Nodes[addr], _ = node.without(before, after)
		}
	}
	return out, n
}
