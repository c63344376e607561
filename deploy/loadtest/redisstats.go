package loadtest

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// redisStats is a snapshot of Redis' own counters.
type redisStats struct {
	Calls map[string]int64 // per command, including those run inside Lua
	Usec  int64            // Redis CPU time spent in commands
	Reads int64            // total_reads_processed: one per client round trip, near enough
	CPU   time.Duration    // used_cpu_user + used_cpu_sys: the server's whole CPU, I/O included
}

func (e *env) redisSnapshot(ctx context.Context) (redisStats, error) {
	s := redisStats{Calls: map[string]int64{}}
	txt, err := e.rdb.Info(ctx, "commandstats", "stats", "cpu").Result()
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
				s.Usec += n
			}
		}
	}
	return s, nil
}

// sub returns s − before.
func (s redisStats) sub(before redisStats) redisStats {
	d := redisStats{Calls: map[string]int64{}, Usec: s.Usec - before.Usec, Reads: s.Reads - before.Reads, CPU: s.CPU - before.CPU}
	for k, v := range s.Calls {
		if n := v - before.Calls[k]; n > 0 {
			d.Calls[k] = n
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
