package deploy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server process started by StartRedis.
type Redis struct {
	URL  string
	Addr string
	Dir  string
	cmd  *exec.Cmd
	done chan struct{}
	tmp  bool // Dir was made by StartRedis: Stop removes it
}

// RedisOpts configures StartRedis.
type RedisOpts struct {
	// Dir holds the server's data; default a new temporary directory.
	Dir string
	// Port to listen on, 127.0.0.1 only; 0 picks a free one.
	Port int
	// AppendOnly turns on AOF with appendfsync everysec, as in redis.conf.
	AppendOnly bool
	// Args are more redis-server flags (e.g. "--replicaof", "127.0.0.1
	// 6380"), after StartRedis' own, so that they win over them.
	Args []string
	// Lead are arguments before the flags: a config file, and --sentinel
	// to run a sentinel (testkit.StartSentinel).
	Lead []string
}

// StartRedis starts redis-server on 127.0.0.1 and waits until it answers.
// It fails with a hint when redis-server is not installed. With no Port it
// picks a free one, and another if that was taken before Redis bound it.
func StartRedis(ctx context.Context, o RedisOpts) (*Redis, error) {
	lead := o.Lead
	if o.Port != 0 {
		return startRedis(ctx, o, lead)
	}
	var errs []error
	for range 3 {
		r, err := startRedis(ctx, o, lead)
		if err == nil {
			return r, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func startRedis(ctx context.Context, o RedisOpts, lead []string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found: install it (apt-get install -y redis-server) or set REDIS_URL")
	}
	tmp := o.Dir == ""
	if tmp {
		if o.Dir, err = os.MkdirTemp("", "hooklane-redis-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil { // redis-server resolves paths after chdir to --dir
		return nil, err
	}
	if o.Port == 0 {
		if o.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	args := append(slices.Clip(lead), "--bind", "127.0.0.1", "--port", strconv.Itoa(o.Port), "--dir", o.Dir,
		"--save", "", "--maxmemory-policy", "noeviction", "--protected-mode", "yes",
		"--logfile", filepath.Join(o.Dir, "redis.log"))
	if o.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, o.Args...)
	cmd := exec.Command(bin, args...)
	// Its own process group: a Ctrl-C meant for hooklane must not kill Redis
	// before hooklane has shut down against it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)), Dir: o.Dir, cmd: cmd, done: make(chan struct{}), tmp: tmp}
	r.URL = "redis://" + r.Addr + "/0"
	go func() { _ = cmd.Wait(); close(r.done) }()

	// Wait for the port with plain dials: go-redis would log each refusal.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if conn, err := net.DialTimeout("tcp", r.Addr, time.Second); err == nil {
			conn.Close()
			break
		}
		select {
		case <-r.done:
			return nil, fmt.Errorf("redis-server exited at start; see %s", filepath.Join(o.Dir, "redis.log"))
		case <-ctx.Done():
			r.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, errors.New("redis-server did not listen within 10s")
		}
	}
	// The answer must come from this process, not from another server that
	// took the port first (this one then exits, unable to bind).
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		r.Stop()
		return nil, fmt.Errorf("redis-server does not answer: %w", err)
	}
	if !strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
		r.Stop()
		return nil, fmt.Errorf("another server answers on %s", r.Addr)
	}
	return r, nil
}

// Stop terminates the server and waits for it to exit. A data directory
// StartRedis made itself is removed.
func (r *Redis) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	if r.tmp {
		os.RemoveAll(r.Dir)
	}
}

// Kill ends the server at once, as a crash would (SIGKILL).
func (r *Redis) Kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// FreePort returns a free 127.0.0.1 port below Linux's ephemeral range
// (32768-60999), unlike Listen(":0"). A server restarted on its port needs
// that: while it is down, a client's outgoing connection could otherwise
// be given the port as its own and keep the server from coming back.
func FreePort() (int, error) {
	for range 200 {
		port := 20000 + rand.IntN(12000)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			l.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free port in 20000-31999")
}
