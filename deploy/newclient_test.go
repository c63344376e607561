package deploy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
)

// NewClient builds a ClusterClient from a single seed address (which
// redis.NewUniversalClient would take for one server): it finds every
// master, puts each key on the master that serves its slot, and asynq's
// Inspector from AsynqConnOpt reads the queues on the cluster.
func TestNewClientCluster(t *testing.T) {
	testkit.Heavy(t, "a Redis Cluster")
	t.Parallel() // its own servers
	ctx := context.Background()
	c, err := deploy.StartCluster(ctx, deploy.ClusterOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	cfg, err := deploy.RedisFromEnv(env(map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": c.Addrs[1]}))
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := cfg.NewClient(deploy.ClientTuning{MaxRetries: 10, PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("NewClient built a %T, want *redis.ClusterClient", rdb)
	}
	if o := cc.Options(); o.MaxRetries != 10 || o.PoolSize != 4 {
		t.Errorf("tuning not applied: max retries %d, pool %d", o.MaxRetries, o.PoolSize)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	// Each key is where the cluster says its slot is, read with a plain
	// client to that master alone; every master got some.
	used := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprintf("spread:%d", i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m, err := testkit.MasterForKey(ctx, c, key)
		if err != nil {
			t.Fatal(err)
		}
		used[m] = true
		node := redis.NewClient(&redis.Options{Addr: m})
		got, err := node.Get(ctx, key).Int()
		node.Close()
		if err != nil || got != i {
			t.Errorf("%s on its master %s: %d, %v", key, m, got, err)
		}
	}
	if len(used) != 3 {
		t.Errorf("keys landed on %d masters, want 3", len(used))
	}

	// asynq through the cluster client; the Inspector asynqmon would use
	// (built from AsynqConnOpt) lists the queue and reads its size, which
	// runs asynq's MEMORY USAGE script on the queue's node.
	queue := "cluster-q"
	ac := asynq.NewClientFromRedisClient(rdb)
	if _, err := ac.EnqueueContext(ctx, asynq.NewTask("t", nil), asynq.Queue(queue)); err != nil {
		t.Fatalf("enqueue on the cluster: %v", err)
	}
	opt := cfg.AsynqConnOpt()
	if _, ok := opt.(asynq.RedisClusterClientOpt); !ok {
		t.Fatalf("AsynqConnOpt is a %T, want asynq.RedisClusterClientOpt", opt)
	}
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	queues, err := insp.Queues()
	if err != nil || !slices.Contains(queues, queue) {
		t.Fatalf("Inspector.Queues: %v, %v; want %s listed", queues, err, queue)
	}
	info, err := insp.GetQueueInfo(queue)
	if err != nil || info.Size != 1 {
		t.Fatalf("Inspector.GetQueueInfo: %+v, %v; want size 1", info, err)
	}
}

// NewClient with Sentinel builds a failover client: it answers PING, and
// the same client, made before the master dies, writes to the promoted
// replica afterwards (a plain client to the old master never would).
// AsynqConnOpt's Inspector reads the queues through the sentinels too.
func TestNewClientSentinelFollowsFailover(t *testing.T) {
	testkit.Heavy(t, "a Sentinel set")
	t.Parallel() // its own servers
	ctx := context.Background()
	s, err := testkit.StartSentinel(ctx, testkit.SentinelOpts{MasterName: "hl-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	cfg := deploy.RedisConfig{SentinelAddrs: s.SentinelAddrs, SentinelMaster: "hl-test"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rdb, err := cfg.NewClient(deploy.ClientTuning{MaxRetries: 1, DialerRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	queue := "sentinel-q"
	if _, err := asynq.NewClientFromRedisClient(rdb).EnqueueContext(ctx, asynq.NewTask("t", nil), asynq.Queue(queue)); err != nil {
		t.Fatal(err)
	}
	opt := cfg.AsynqConnOpt()
	if _, ok := opt.(asynq.RedisFailoverClientOpt); !ok {
		t.Fatalf("AsynqConnOpt is a %T, want asynq.RedisFailoverClientOpt", opt)
	}
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	if q, err := insp.Queues(); err != nil || !slices.Contains(q, queue) {
		t.Fatalf("Inspector.Queues: %v, %v", q, err)
	}
	if err := rdb.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}

	old, err := s.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newAddr, err := s.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	// The client learns the new master from the sentinels (its
	// +switch-master subscription, or asking again after a failed dial).
	var lastErr error
	if !testkit.Poll(10*time.Second, func() bool {
		lastErr = rdb.Set(ctx, "after-failover", "x", 0).Err()
		return lastErr == nil
	}) {
		t.Fatalf("the failover client made before the failover does not write to the new master: %v", lastErr)
	}
	direct := redis.NewClient(&redis.Options{Addr: newAddr})
	defer direct.Close()
	if got, err := direct.Get(ctx, "after-failover").Result(); err != nil || got != "x" {
		t.Errorf("the write is not on the new master %s: %q, %v", newAddr, got, err)
	}
	if size := testkit.QueueSize(t, insp, queue); size != 1 {
		t.Errorf("Inspector after the failover: queue size %d, want 1", size)
	}
}
