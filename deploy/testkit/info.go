package testkit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// InfoInt reads one integer field of Redis' INFO section (stats:
// total_reads_processed, total_net_output_bytes, …), failing t when it
// is missing.
func InfoInt(t testing.TB, c redis.Cmdable, section, field string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %s is %q", section, field, v)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO %s", field, section)
	return 0
}

// CommandCalls reads INFO commandstats: command (lower case) → calls,
// those run inside scripts included.
func CommandCalls(t testing.TB, c redis.Cmdable) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		cmd, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		var calls int64
		fmt.Sscanf(rest, "calls=%d", &calls)
		out[cmd] = calls
	}
	return out
}
