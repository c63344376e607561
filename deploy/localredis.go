package deploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ForeignRedisError is LocalRedis' refusal of a server on its port that
// hooklane did not start: the demo writes subscribers, counters and a
// breaker's state, which do not belong in somebody else's Redis unless they
// say so.
type ForeignRedisError struct {
	Addr  string // 127.0.0.1:port
	Redis bool   // it answered PING
}

func (e *ForeignRedisError) Error() string {
	if !e.Redis {
		return fmt.Sprintf("%s is taken by a process that is not a Redis hooklane started; stop it, or start hooklane's own Redis on another port (hooklane dev -redis-port N)", e.Addr)
	}
	return fmt.Sprintf("a Redis already listens on %[1]s and hooklane did not start it; set REDIS_URL=redis://%[1]s to use it, or stop it (or start hooklane's own on another port: hooklane dev -redis-port N)", e.Addr)
}

// LocalRedis starts hooklane dev's own redis-server on 127.0.0.1:port with
// AOF persistence and its data in dir, so that a later run finds what this
// one wrote; fresh deletes dir first. It never writes into a server it did
// not start: one is hooklane's own when its working directory (CONFIG GET
// dir) is dir, which redis-server reports and no other server has. A server
// of its own still running on port (its hooklane was killed; the server has
// its own process group) is shut down, AOF written, and started again, so
// that Stop always ends the server; any other server there is refused with
// a *ForeignRedisError, before anything is written or deleted.
func LocalRedis(ctx context.Context, dir string, port int, fresh bool) (*Redis, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := stopOwnRedis(ctx, addr, dir); err != nil {
		return nil, err
	}
	if fresh {
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	return StartRedis(ctx, RedisOpts{Dir: dir, Port: port, AppendOnly: true})
}

// stopOwnRedis returns nil when nothing listens on addr, shuts down a
// server whose working directory is dir, and refuses any other.
func stopOwnRedis(ctx context.Context, addr, dir string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil // free
	}
	conn.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, PoolSize: 1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return &ForeignRedisError{Addr: addr, Redis: isRedisReply(err)}
	}
	got, err := c.ConfigGet(ctx, "dir").Result()
	// redis-server reports the directory it changed into, symlinks resolved.
	real, _ := filepath.EvalSymlinks(dir)
	if err != nil || got["dir"] == "" || got["dir"] != dir && got["dir"] != real {
		return &ForeignRedisError{Addr: addr, Redis: true}
	}
	// Ours: its reply is the connection closing, after the AOF is written.
	_ = c.Shutdown(ctx).Err()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		conn.Close()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("hooklane's own Redis from an earlier run, on %s with its data in %s, did not stop within 10s", addr, dir)
}

// isRedisReply reports whether err is an error reply (NOAUTH, a renamed
// command): a Redis, one that will not talk to us.
func isRedisReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
