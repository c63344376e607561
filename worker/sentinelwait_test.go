package worker_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// producer.Config.WaitReplicas against a master that dies while its
// replica is behind (stopped, its link cut: what a network partition or a
// congested link leaves):
// with WaitReplicas 1 every acknowledged publish is on the promoted
// replica, and a publish the replica cannot have is refused with
// ErrNotReplicated, also while the replica is connected but stopped;
// without it (the control) the publishes made while the link was down
// were acknowledged and are lost, so the scenario does lose what the
// option keeps.
func sentinelWaitReplicas(t *testing.T) {
	// Its two runs side by side.
	t.Run("wait-1", func(t *testing.T) { t.Parallel(); waitReplicasFailover(t, 1) })
	t.Run("no-wait", func(t *testing.T) { t.Parallel(); waitReplicasFailover(t, 0) })
}

func waitReplicasFailover(t *testing.T, wait int) {
	ctx := context.Background()
	sn, err := testkit.StartSentinel(ctx, testkit.SentinelOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sn.Stop)
	master, replica := plainClient(t, sn.Servers[0].Addr), plainClient(t, sn.Servers[1].Addr)
	rdb, err := deploy.RedisConfig{SentinelAddrs: sn.SentinelAddrs, SentinelMaster: sn.MasterName}.NewClient(deploy.ClientTuning{DialerRetries: 1, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	ns := testkit.Namespace("wait")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns, WaitReplicas: wait, WaitTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "https://hooks.example.test/h", Limit: fast}); err != nil {
		t.Fatal(err) // no worker runs: the tasks stay queued, nothing is dialed
	}
	acked := map[string]time.Time{}
	publish := func(id string) error {
		_, err := p.Publish(ctx, tasks.Event{ID: id, Type: "t", Data: []byte(`1`)}, nil)
		if err == nil {
			acked[id] = time.Now()
		}
		return err
	}
	for i := range 20 {
		if err := publish(fmt.Sprintf("healthy%02d", i)); err != nil {
			t.Fatalf("publish with a healthy replica: %v", err)
		}
	}

	if wait > 0 {
		// How long a replica takes to hold a write: the round trip of a
		// write and a WAIT for it, as the producer sends them.
		var lag []time.Duration
		for range 50 {
			start := time.Now()
			var w *redis.Cmd
			if _, err := master.Pipelined(ctx, func(pl redis.Pipeliner) error {
				pl.Publish(ctx, tasks.Keys(ns).ReplicationMark(), "")
				w = pl.Do(ctx, "wait", 1, 1000)
				return nil
			}); err != nil || w.Val() != int64(1) {
				t.Fatalf("PUBLISH and WAIT 1: %v, %v", w.Val(), err)
			}
			lag = append(lag, time.Since(start))
		}
		slices.Sort(lag)
		t.Logf("a write and a WAIT 1 for it: median %v, max %v (50 round trips)", lag[len(lag)/2].Round(time.Microsecond), lag[len(lag)-1].Round(time.Microsecond))

		// The replica connected but stopped: it cannot acknowledge, so the
		// publish is refused (a WAIT that counted another connection's last
		// write would pass at once). Resumed, the re-publish is acknowledged.
		pid := serverPID(t, replica)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		err := publish("stopped")
		_ = syscall.Kill(pid, syscall.SIGCONT) // within the sentinels' 1s, so it stays eligible
		if !errors.Is(err, producer.ErrNotReplicated) {
			t.Fatalf("publish while the replica is stopped: %v, want ErrNotReplicated", err)
		}
		if err := publish("stopped"); err != nil {
			t.Fatalf("the same publish once the replica is back: %v", err)
		}
	}

	// The link cut while the replica is stopped, so that it cannot
	// reconnect (Redis 7 replicas do at once): what the master takes now
	// reaches no replica, and the master dies before the replica resumes.
	pid := serverPID(t, replica)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	if err := master.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	cut := []string{"cut0", "cut1"}
	for _, id := range cut {
		if err := publish(id); err != nil && (wait == 0 || !errors.Is(err, producer.ErrNotReplicated)) {
			t.Fatalf("publish with the link down: %v", err)
		}
	}
	old, err := sn.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = syscall.Kill(pid, syscall.SIGCONT) // stopped for well under the sentinels' 1s: still eligible
	if _, err := sn.WaitFailover(ctx, old); err != nil {
		t.Fatal(err)
	}

	// An acknowledged publish survives if its delivery record does: the
	// record is what a publish books, and what its task (or its place in
	// the subscriber's schedule) refers to.
	var lost []string
	for id := range acked {
		var n int64
		var err error
		testkit.Poll(5*time.Second, func() bool { // the client finds the new master
			n, err = rdb.Exists(ctx, tasks.Keys(ns).Delivery("s", id)).Result()
			return err == nil
		})
		if err != nil || n == 0 {
			lost = append(lost, fmt.Sprintf("%s (%v before the kill: %v)", id, killed.Sub(acked[id]).Round(time.Millisecond), cmp.Or(err, errors.New("no delivery record"))))
		}
	}
	slices.Sort(lost)
	refused := len(cut) - countIn(acked, cut)
	t.Logf("WaitReplicas %d: %d acknowledged, %d lost %v; with the link cut %d published, %d refused",
		wait, len(acked), len(lost), lost, len(cut), refused)
	switch {
	case wait > 0 && len(lost) > 0:
		t.Errorf("%d acknowledged publishes lost with WaitReplicas %d: %v", len(lost), wait, lost)
	case wait == 0 && len(lost) == 0:
		t.Errorf("nothing lost without WaitReplicas: the link cut did not leave the replica behind, and the test proves nothing")
	}
}

func plainClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// serverPID is the process id a redis-server reports (INFO server).
func serverPID(t *testing.T, c *redis.Client) int {
	t.Helper()
	return int(testkit.InfoInt(t, c, "server", "process_id"))
}

func countIn(m map[string]time.Time, ids []string) (n int) {
	for _, id := range ids {
		if _, ok := m[id]; ok {
			n++
		}
	}
	return n
}
