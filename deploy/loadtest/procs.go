package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/worker"
)

// proc is a running worker or floor server, in this process or as a
// subprocess of Config.Exec.
type proc struct {
	name   string
	cmd    *exec.Cmd
	done   chan error
	cancel context.CancelFunc
	log    *os.File
	// delivered counts an in-process worker's 2xx answers (nil for a
	// subprocess or the floor).
	delivered func() int64
}

// startWorker starts hooklane worker i (from 1) on namespace ns. With
// Config.Exec it is `hooklane worker` configured through its environment
// variables, as a deployment runs it; otherwise worker.New in this process.
func (e *env) startWorker(ctx context.Context, ns string, i int) (*proc, error) {
	wc := e.cfg.Worker
	if e.cfg.ExternalWorkers {
		return &proc{name: "external"}, nil
	}
	name := fmt.Sprintf("worker-%s-%d", ns, i)
	if e.cfg.Exec == "" {
		wc.Redis, wc.Namespace = e.rdb, ns
		w, err := worker.New(wc)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p := &proc{name: name, done: make(chan error, 1), cancel: cancel, delivered: w.Stats().Delivered.Load}
		go func() { p.done <- w.Run(ctx) }()
		return p, nil
	}
	env := append(e.cfg.Redis.Env(), "HOOKLANE_NAMESPACE="+ns)
	add := func(name string, v any, zero bool) {
		if !zero {
			env = append(env, fmt.Sprintf("%s=%v", name, v))
		}
	}
	add("HOOKLANE_CONCURRENCY", wc.Concurrency, wc.Concurrency == 0)
	add("HOOKLANE_MAX_WAIT", wc.MaxWait, wc.MaxWait == 0)
	add("HOOKLANE_BACKOFF_BASE", wc.BackoffBase, wc.BackoffBase == 0)
	add("HOOKLANE_BACKOFF_MAX", wc.BackoffMax, wc.BackoffMax == 0)
	add("HOOKLANE_SHUTDOWN_TIMEOUT", wc.ShutdownTimeout, wc.ShutdownTimeout == 0)
	add("HOOKLANE_QUEUE_SHARDS", wc.Shards, wc.Shards == 0)
	cidrs := make([]string, len(wc.AllowedCIDRs))
	for i, p := range wc.AllowedCIDRs {
		cidrs[i] = p.String()
	}
	add("HOOKLANE_ALLOWED_CIDRS", strings.Join(cidrs, ","), len(cidrs) == 0)
	return e.exec(name, env, "worker")
}

// startFloor starts the floor server (see ServeFloor) on queue, with
// servers asynq Servers.
func (e *env) startFloor(ctx context.Context, queue string, servers int) (*proc, error) {
	fc := FloorConfig{RedisConfig: e.cfg.Redis, Queue: queue, Concurrency: e.cfg.Worker.Concurrency, Servers: servers}
	name := fmt.Sprintf("floor-%s-x%d", queue, fc.WithDefaults().Servers)
	if e.cfg.Exec == "" {
		fc.Redis = e.rdb
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p := &proc{name: name, done: make(chan error, 1), cancel: cancel}
		go func() { p.done <- ServeFloor(ctx, fc) }()
		return p, nil
	}
	// The Redis goes as environment variables, as to a worker: flags
	// cannot carry Sentinel, passwords or TLS.
	return e.exec(name, fc.RedisConfig.Env(), "bench", "-serve-floor", "-floor-queue", queue,
		"-concurrency", strconv.Itoa(fc.WithDefaults().Concurrency), "-floor-servers", strconv.Itoa(fc.WithDefaults().Servers))
}

func (e *env) exec(name string, env []string, args ...string) (*proc, error) {
	f, err := os.Create(filepath.Join(e.cfg.Out, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.cfg.Exec, args...)
	cmd.Env = append(withoutRedisVars(os.Environ()), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a Ctrl-C for the harness must reach it through
	// Stop, after the harness is done with it, not before.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan error, 1), log: f}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// withoutRedisVars is environ without the Redis variables: a child given
// Config.Redis as variables must not also see this process' own (two modes
// at once would stop it, a stray password would go to the wrong Redis).
func withoutRedisVars(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(deploy.RedisEnvVars, name)
	})
}

// PeakRSS is the subprocess's peak resident set in bytes (VmHWM), 0 when
// it runs in this process.
func (p *proc) PeakRSS() int64 {
	if p.cmd == nil {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// CPU is the CPU time (user + system) the subprocess has used so far, 0
// when it runs in this process.
func (p *proc) CPU() time.Duration {
	if p.cmd == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ, 100 on every Linux this runs on
	return time.Duration(ut+st) * time.Second / ticks
}

// selfCPU is this process's CPU time: the generator's and the receiver's.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Stop shuts the process down gracefully (SIGTERM; Kill after 40s) and
// returns its peak RSS, read just before.
func (p *proc) Stop() (int64, error) {
	if p.done == nil { // external
		return 0, nil
	}
	rss := p.PeakRSS()
	if p.cancel != nil {
		p.cancel()
	} else {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	var err error
	select {
	case err = <-p.done:
	case <-time.After(40 * time.Second):
		if p.cmd != nil {
			_ = p.cmd.Process.Kill()
		}
		err = <-p.done
		err = errors.Join(fmt.Errorf("%s did not stop within 40s", p.name), err)
	}
	if p.log != nil {
		p.log.Close()
	}
	return rss, err
}
