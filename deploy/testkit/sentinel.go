package testkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
)

// SentinelOpts configures StartSentinel.
type SentinelOpts struct {
	// Dir holds one folder per process; default a new temporary directory,
	// which Stop removes.
	Dir string
	// MasterName is the name the sentinels monitor the master by. Default
	// "hooklane".
	MasterName string
}

// Sentinel is a master, its replica and three sentinels watching them,
// all redis-server processes on 127.0.0.1, started by StartSentinel: for
// the tests of a Sentinel failover (production code only connects to
// one, deploy.RedisConfig).
type Sentinel struct {
	MasterName    string
	SentinelAddrs []string
	// Servers are the master and the replica as started; after a failover
	// their roles are swapped (MasterAddr says which is which).
	Servers   []*deploy.Redis
	sentinels []*deploy.Redis
	Dir       string
	tmp       bool
}

// StartSentinel starts a master, a replica of it and three sentinels with
// a quorum of 2 that deem the master down after 1s, and returns once the
// replica is in sync and every sentinel knows the master, the replica and
// the two other sentinels, so that a failover can happen at once.
func StartSentinel(ctx context.Context, o SentinelOpts) (_ *Sentinel, err error) {
	s := &Sentinel{MasterName: cmp.Or(o.MasterName, "hooklane"), Dir: o.Dir, tmp: o.Dir == ""}
	if s.tmp {
		if s.Dir, err = os.MkdirTemp("", "hooklane-sentinel-"); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	master, err := deploy.StartRedis(ctx, deploy.RedisOpts{Dir: filepath.Join(s.Dir, "master")})
	if err != nil {
		return nil, fmt.Errorf("sentinel's master: %w", err)
	}
	s.Servers = append(s.Servers, master)
	host, port, _ := strings.Cut(master.Addr, ":")
	replica, err := deploy.StartRedis(ctx, deploy.RedisOpts{Dir: filepath.Join(s.Dir, "replica"), Args: []string{"--replicaof", host, port}})
	if err != nil {
		return nil, fmt.Errorf("sentinel's replica: %w", err)
	}
	s.Servers = append(s.Servers, replica)
	deadline := time.Now().Add(20 * time.Second)
	if err := pollErr(ctx, deadline, "the replica to sync", func() (bool, error) {
		return infoHas(ctx, replica.Addr, "replication", "master_link_status:up")
	}); err != nil {
		return nil, err
	}

	// Sentinels rewrite their config file: each has its own, in its own folder.
	conf := fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s %[2]s %[3]s 2
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 5000
sentinel parallel-syncs %[1]s 1
`, s.MasterName, host, port)
	for i := range 3 {
		dir := filepath.Join(s.Dir, "sentinel-"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		r, err := deploy.StartRedis(ctx, deploy.RedisOpts{Dir: dir, Lead: []string{path, "--sentinel"}})
		if err != nil {
			return nil, fmt.Errorf("sentinel %d: %w", i, err)
		}
		s.sentinels = append(s.sentinels, r)
		s.SentinelAddrs = append(s.SentinelAddrs, r.Addr)
	}
	for _, addr := range s.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		err := pollErr(ctx, deadline, "sentinel "+addr+" to know the master, its replica and the other sentinels", func() (bool, error) {
			m, err := sc.Master(ctx, s.MasterName).Result()
			return err == nil && m["flags"] == "master" && m["num-slaves"] == "1" && m["num-other-sentinels"] == "2", err
		})
		sc.Close()
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// MasterAddr is the master's host:port as the first sentinel that answers
// names it (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var errs []error
	for _, addr := range s.SentinelAddrs {
		a, err := s.askSentinel(ctx, addr)
		if err == nil {
			return a, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return "", errors.Join(errs...)
}

func (s *Sentinel) askSentinel(ctx context.Context, addr string) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("unexpected answer %q", hp)
	}
	return hp[0] + ":" + hp[1], nil
}

// KillMaster ends the current master's process with SIGKILL, as a crash
// would, and returns its address for WaitFailover.
func (s *Sentinel) KillMaster(ctx context.Context) (string, error) {
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range s.Servers {
		if r.Addr == addr {
			r.Kill()
			return addr, nil
		}
	}
	return "", fmt.Errorf("the sentinels name %s, which is not one of this setup's servers", addr)
}

// WaitFailover polls until every sentinel names a master other than
// oldAddr and that server says it is a master (a sentinel names the
// promoted replica while it is being promoted). It gives up after 30s.
func (s *Sentinel) WaitFailover(ctx context.Context, oldAddr string) (string, error) {
	var newAddr string
	err := pollErr(ctx, time.Now().Add(30*time.Second), "a failover away from "+oldAddr, func() (bool, error) {
		newAddr = ""
		for _, addr := range s.SentinelAddrs {
			a, err := s.askSentinel(ctx, addr)
			if err != nil {
				return false, err
			}
			if a == oldAddr || (newAddr != "" && a != newAddr) {
				return false, nil
			}
			newAddr = a
		}
		return infoHas(ctx, newAddr, "replication", "role:master")
	})
	return newAddr, err
}

// Stop stops the sentinels first (so that they fail nothing over while the
// servers go), then the servers, and removes a Dir that StartSentinel made.
func (s *Sentinel) Stop() {
	for _, r := range s.sentinels {
		r.Stop()
	}
	for _, r := range s.Servers {
		r.Stop()
	}
	if s.tmp {
		os.RemoveAll(s.Dir)
	}
}

// infoHas reports whether the server at addr lists line in an INFO section.
func infoHas(ctx context.Context, addr, section, line string) (bool, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return false, err
	}
	return strings.Contains(info, line+"\r\n"), nil
}

// pollErr is PollEvery (50ms) for a cond that may fail: the error names
// what was awaited and cond's last error, or is ctx's.
func pollErr(ctx context.Context, deadline time.Time, what string, cond func() (bool, error)) error {
	var last error
	ok := PollEvery(time.Until(deadline), 50*time.Millisecond, func() bool {
		done, err := cond()
		last = err
		return done || ctx.Err() != nil
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case !ok:
		return fmt.Errorf("timed out waiting for %s (last error: %v)", what, last)
	}
	return nil
}
