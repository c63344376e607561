package loadtest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
)

// The harness' own reads (a queue sample, a settle poll) are counted as it
// sends them and taken out of INFO's figures, so that the commands and
// round trips per delivery are hooklane's alone: here the "work" is 5
// INCRs in 5 round trips and the harness samples twice beside them.
func TestHarnessReadsAreLeftOutOfTheRedisFigures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	dial := func() redis.UniversalClient {
		c, err := deploy.RedisConfig{URL: r.URL}.NewClient(deploy.ClientTuning{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	work, obs := dial(), dial()
	e := &env{rdb: work, obs: obs, seen: observerOf(obs)}
	st := stock{queues: []string{"q"}, lots: []string{"lot:a", "lot:b"}, outs: []string{"out:a", "out:b"}}
	for _, c := range []redis.UniversalClient{work, obs} { // connections open before the count
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before, err := e.redisSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen0 := e.seen.snapshot()
	for range 5 {
		work.Incr(ctx, "n")
		if _, err := backlog(ctx, e.look(), st); err != nil {
			t.Fatal(err)
		}
	}
	seen1 := e.seen.snapshot()
	after, err := e.redisSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := after.sub(before)
	d, harness := raw.without(seen0, seen1)
	// a sample: 4 commands a queue, one a lot, one an out (and a
	// connection's HELLO and CLIENT SETINFO when the pool opens one)
	if harness < 5*8 || raw.Calls["zcard"] != 5*6 || d.Calls["zcard"] != 0 || d.Calls["llen"] != 0 || d.Calls["incr"] != 5 {
		t.Fatalf("left out %d (want 40 and a connection's); zcard %d of %d left, llen %d, incr %d (want 0, 0, 5)", harness, d.Calls["zcard"], raw.Calls["zcard"],
			d.Calls["llen"], d.Calls["incr"])
	}
	// INFO itself (the after snapshot's) is the one command left beside the work
	if n := d.total(); n != 5+1 {
		t.Fatalf("%d commands left: %v; want the 5 INCRs and INFO", n, d.Calls)
	}
	if raw.Reads-d.Reads < 5 || d.Reads < 5 || d.Reads > 7 {
		t.Fatalf("round trips: %d raw, %d left; want the 5 samples' taken out and about the 5 INCRs' left", raw.Reads, d.Reads)
	}
	for _, node := range d.Nodes {
		if node.total() != d.total() || node.Reads != d.Reads {
			t.Fatalf("the one server's figures (%d commands, %d trips) are not the sums' (%d, %d)", node.total(), node.Reads, d.total(), d.Reads)
		}
	}
	if d.UsecBy["zcard"] != 0 || d.Usec >= raw.Usec {
		t.Fatalf("time in commands: zcard %dµs left, %dµs of %dµs; want the samples' taken out", d.UsecBy["zcard"], d.Usec, raw.Usec)
	}
}
