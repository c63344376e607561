package testkit_test

import (
	"context"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/redis/go-redis/v9"
)

// The harness: after KillMaster the sentinels promote the replica, which
// holds what the master had and accepts writes; Stop ends every process
// and removes the folder.
func TestSentinelFailoverPromotesTheReplica(t *testing.T) {
	testkit.Heavy(t, "a Sentinel set")
	t.Parallel() // its own servers
	ctx := context.Background()
	s, err := testkit.StartSentinel(ctx, testkit.SentinelOpts{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	if len(s.SentinelAddrs) != 3 || len(s.Servers) != 2 {
		t.Fatalf("%d sentinels, %d servers; want 3 and 2", len(s.SentinelAddrs), len(s.Servers))
	}
	old, err := s.MasterAddr(ctx)
	if err != nil || old != s.Servers[0].Addr {
		t.Fatalf("MasterAddr %q, %v; want the master started first, %s", old, err, s.Servers[0].Addr)
	}
	m := redis.NewClient(&redis.Options{Addr: old})
	if err := m.Set(ctx, "before", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT: the replica has the write before its master dies.
	if n, err := m.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d, %v", n, err)
	}
	m.Close()

	killed, err := s.KillMaster(ctx)
	if err != nil || killed != old {
		t.Fatalf("KillMaster: %q, %v; want %s", killed, err, old)
	}
	start := time.Now()
	newAddr, err := s.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s took %v", newAddr, time.Since(start).Round(time.Millisecond))
	if newAddr != s.Servers[1].Addr {
		t.Fatalf("new master %s, want the replica %s", newAddr, s.Servers[1].Addr)
	}
	if got, _ := s.MasterAddr(ctx); got != newAddr {
		t.Errorf("MasterAddr after the failover: %s, want %s", got, newAddr)
	}
	nm := redis.NewClient(&redis.Options{Addr: newAddr})
	defer nm.Close()
	if err := nm.Set(ctx, "after", "written", 0).Err(); err != nil {
		t.Errorf("the new master refuses a write: %v", err)
	}
	if got, err := nm.Get(ctx, "before").Result(); err != nil || got != "kept" {
		t.Errorf("the new master lost the write made before the failover: %q, %v", got, err)
	}

	s.Stop()
	stopped = true
	for _, addr := range append(slices.Clone(s.SentinelAddrs), newAddr) {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still answers after Stop", addr)
		}
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s: %v", s.Dir, err)
	}
}
