package deploy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOpts configures StartCluster.
type ClusterOpts struct {
	// Masters is the number of master nodes, at least 3 (the fewest
	// `redis-cli --cluster create` accepts). Default 3. There are no
	// replicas: a killed master's slots stay down.
	Masters int
	// Dir holds one folder per node; default a new temporary directory,
	// which Stop removes.
	Dir string
	// AppendOnly turns on AOF on every node, as StartRedis does.
	AppendOnly bool
}

// Cluster is a Redis Cluster of redis-server processes on 127.0.0.1,
// started by StartCluster.
type Cluster struct {
	// Addrs are the masters' host:port, in start order.
	Addrs []string
	// Nodes are the processes, in the order of Addrs: a test can Kill one.
	Nodes []*Redis
	Dir   string
	tmp   bool
}

// StartCluster starts o.Masters cluster-enabled redis-servers on free
// 127.0.0.1 ports (each with the persistence and eviction flags of
// StartRedis), joins them with `redis-cli --cluster create` so that the
// 16384 slots are spread evenly, and returns once every node reports
// cluster_state:ok and knows every other.
func StartCluster(ctx context.Context, o ClusterOpts) (_ *Cluster, err error) {
	o.Masters = cmp.Or(o.Masters, 3)
	if o.Masters < 3 {
		return nil, fmt.Errorf("deploy: ClusterOpts.Masters must be at least 3, not %d", o.Masters)
	}
	cli, lerr := exec.LookPath("redis-cli")
	if lerr != nil {
		return nil, errors.New("redis-cli not found: install it (apt-get install -y redis-tools)")
	}
	c := &Cluster{Dir: o.Dir, tmp: o.Dir == ""}
	if c.tmp {
		if c.Dir, err = os.MkdirTemp("", "hooklane-cluster-"); err != nil {
			return nil, err
		}
	}
	// redis-server opens --cluster-config-file after its chdir to --dir:
	// a relative Dir would name a file inside itself.
	if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for i := range o.Masters {
		n, err := startClusterNode(ctx, filepath.Join(c.Dir, "node-"+strconv.Itoa(i)), o.AppendOnly)
		if err != nil {
			return nil, fmt.Errorf("cluster node %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := append(append([]string{"--cluster", "create"}, c.Addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(cctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	if err := c.waitOK(ctx, 20*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// startClusterNode starts one node in dir; it tries other ports when the
// chosen ones were taken before redis-server bound them.
func startClusterNode(ctx context.Context, dir string, aof bool) (*Redis, error) {
	var errs []error
	for range 3 {
		// A failed try may have written its nodes file: start clean.
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		// The bus port is chosen too: port+10000, redis' default, would
		// land in the ephemeral range, where a client's socket may hold it.
		bus, err := FreePort()
		if err != nil {
			return nil, err
		}
		if bus == port {
			continue
		}
		r, err := StartRedis(ctx, RedisOpts{Dir: dir, Port: port, AppendOnly: aof, Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(port)+".conf"),
			"--cluster-port", strconv.Itoa(bus),
			// A stopped node is failed after 2s, not 15s, for tests that kill one.
			"--cluster-node-timeout", "2000",
		}})
		if err == nil {
			return r, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// waitOK polls every node until it reports the cluster ok, with every slot
// served and every node known.
func (c *Cluster) waitOK(ctx context.Context, timeout time.Duration) error {
	want := []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:" + strconv.Itoa(len(c.Addrs))}
	deadline := time.Now().Add(timeout)
	for _, addr := range c.Addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		var info string
		err := pollUntil(ctx, deadline, "cluster node "+addr+" to be ok", func() (bool, error) {
			var err error
			info, err = rdb.ClusterInfo(ctx).Result()
			return err == nil && containsAll(info, want), err
		})
		rdb.Close()
		if err != nil {
			return fmt.Errorf("%w; its CLUSTER INFO: %q", err, info)
		}
	}
	return nil
}

func containsAll(info string, lines []string) bool {
	for _, l := range lines {
		if !strings.Contains(info, l+"\r\n") {
			return false
		}
	}
	return true
}

// Stop stops every node and removes a Dir that StartCluster made.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
	if c.tmp {
		os.RemoveAll(c.Dir)
	}
}

// pollUntil calls cond every 50ms until it holds, ctx ends or deadline
// passes; the error then names what was awaited and cond's last error.
func pollUntil(ctx context.Context, deadline time.Time, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s (last error: %v)", what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
