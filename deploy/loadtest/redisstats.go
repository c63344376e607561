package loadtest

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStats is a snapshot of Redis' own counters, summed over every
// master of a Cluster: a delivery's commands are spread over the masters
// that hold its keys, so one node's counters are a fraction of its cost.
type redisStats struct {
	Calls map[string]int64 // per command, including those run inside Lua
	Usec  int64            // Redis CPU time spent in commands
	// UsecBy is Usec per command; a script's (evalsha's) includes the
	// commands it ran, which are counted under their own names as well.
	UsecBy map[string]int64
	Reads  int64         // total_reads_processed: one per client round trip, near enough
	CPU    time.Duration // used_cpu_user + used_cpu_sys: the server's whole CPU, I/O included
	// Nodes are the same counters of each master (of the one server),
	// by address.
	Nodes map[string]redisStats
}

func (e *env) redisSnapshot(ctx context.Context) (redisStats, error) {
	return snapshotRedis(ctx, e.rdb)
}

// snapshotRedis reads INFO on every master of rdb (on its one server when
// it is not a Cluster client) and sums it.
func snapshotRedis(ctx context.Context, rdb redis.UniversalClient) (redisStats, error) {
	s := redisStats{Calls: map[string]int64{}, UsecBy: map[string]int64{}, Nodes: map[string]redisStats{}}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		n, err := nodeSnapshot(ctx, rdb)
		if err != nil {
			return s, err
		}
		name := "redis"
		if c, ok := rdb.(*redis.Client); ok {
			name = c.Options().Addr
		}
		s.add(name, n)
		return s, nil
	}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := nodeSnapshot(ctx, c)
		if err != nil {
			return fmt.Errorf("INFO on master %s: %w", c.Options().Addr, err)
		}
		mu.Lock()
		defer mu.Unlock()
		s.add(c.Options().Addr, n)
		return nil
	})
	return s, err
}

// add adds node's counters to s's sums and lists them under addr.
func (s *redisStats) add(addr string, node redisStats) {
	for k, v := range node.Calls {
		s.Calls[k] += v
	}
	for k, v := range node.UsecBy {
		s.UsecBy[k] += v
	}
	s.Usec += node.Usec
	s.Reads += node.Reads
	s.CPU += node.CPU
	s.Nodes[addr] = node
}

// nodeSnapshot reads one server's counters.
func nodeSnapshot(ctx context.Context, c redis.Cmdable) (redisStats, error) {
	s := redisStats{Calls: map[string]int64{}, UsecBy: map[string]int64{}}
	txt, err := c.Info(ctx, "commandstats", "stats", "cpu").Result()
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(txt, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			s.Reads, _ = strconv.ParseInt(v, 10, 64)
		}
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			s.CPU += time.Duration(f * float64(time.Second))
		}
		name, rest, ok := strings.Cut(line, ":")
		cmd, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.Calls[cmd] = n
			case "usec":
				s.UsecBy[cmd] = n
				s.Usec += n
			}
		}
	}
	return s, nil
}

// sub returns s − before, node by node as well.
func (s redisStats) sub(before redisStats) redisStats {
	d := redisStats{Calls: map[string]int64{}, UsecBy: map[string]int64{}, Usec: s.Usec - before.Usec, Reads: s.Reads - before.Reads, CPU: s.CPU - before.CPU}
	for k, v := range s.Calls {
		if n := v - before.Calls[k]; n > 0 {
			d.Calls[k] = n
		}
	}
	for k, v := range s.UsecBy {
		if n := v - before.UsecBy[k]; n > 0 {
			d.UsecBy[k] = n
		}
	}
	if s.Nodes != nil {
		d.Nodes = map[string]redisStats{}
		for addr, n := range s.Nodes {
			d.Nodes[addr] = n.sub(before.Nodes[addr])
		}
	}
	return d
}

func (s redisStats) total() int64 {
	var n int64
	for _, v := range s.Calls {
		n += v
	}
	return n
}

// nodeAddrs are s's nodes' addresses, sorted.
func (s redisStats) nodeAddrs() []string {
	addrs := make([]string, 0, len(s.Nodes))
	for a := range s.Nodes {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	return addrs
}
