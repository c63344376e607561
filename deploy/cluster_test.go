package deploy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
)

// The harness: three masters come up serving every slot, keys spread over
// all of them, and Stop ends every node and removes its folder.
func TestStartClusterSpreadsKeys(t *testing.T) {
	testkit.Heavy(t, "a Redis Cluster")
	t.Parallel() // its own servers
	ctx := context.Background()
	if _, err := deploy.StartCluster(ctx, deploy.ClusterOpts{Masters: 2}); err == nil || !strings.Contains(err.Error(), "Masters") {
		t.Fatalf("StartCluster with 2 masters: %v, want an error naming Masters", err)
	}
	c, err := deploy.StartCluster(ctx, deploy.ClusterOpts{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	if len(c.Addrs) != 3 || len(c.Nodes) != 3 {
		t.Fatalf("%d addresses, %d nodes; want 3 and 3", len(c.Addrs), len(c.Nodes))
	}
	for _, addr := range c.Addrs {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("node %s is not on 127.0.0.1", addr)
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		info, err := rdb.ClusterInfo(ctx).Result()
		rdb.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_size:3") {
			t.Errorf("node %s: %v %q", addr, err, info)
		}
	}
	perMaster := map[string]int{}
	for i := range 60 {
		m, err := testkit.MasterForKey(ctx, c, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		perMaster[m]++
	}
	for _, addr := range c.Addrs {
		if perMaster[addr] < 5 {
			t.Errorf("master %s serves %d of 60 keys: %v", addr, perMaster[addr], perMaster)
		}
	}
	// A hash tag keeps keys in one slot, so on one master (tasks/keys.go).
	a, _ := testkit.MasterForKey(ctx, c, "hooklane:s:{acme}:gate")
	b, _ := testkit.MasterForKey(ctx, c, "hooklane:s:{acme}:inflight")
	if a != b || a == "" {
		t.Errorf("keys tagged {acme} on %q and %q", a, b)
	}

	c.Stop()
	stopped = true
	for _, addr := range c.Addrs {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("node %s still answers after Stop", addr)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s: %v", c.Dir, err)
	}
}

// A relative Dir (as `hooklane bench -cluster -out .hooklane/x` gives)
// starts: redis-server resolves the nodes file after its chdir.
func TestStartClusterInARelativeDir(t *testing.T) {
	testkit.Heavy(t, "a Redis Cluster")
	t.Chdir(t.TempDir())
	c, err := deploy.StartCluster(context.Background(), deploy.ClusterOpts{Dir: "rel/cluster"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if !filepath.IsAbs(c.Dir) {
		t.Errorf("Dir %q, want it made absolute", c.Dir)
	}
}
