package loadtest

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// IdleSpec sizes MeasureIdle. Zero fields take the defaults named.
type IdleSpec struct {
	// Window is how long the commands are counted. Default 20s.
	Window time.Duration
	// Warmup is how long after the worker has started its Servers the
	// count begins: its first region check and rescuer pass (10s apart by
	// default) are then behind it, as in a worker that has run for hours.
	// Default 12s.
	Warmup time.Duration
	// Publishes is how many events are published after the window, each
	// after 1-3s of idleness, to time publish-to-delivery on an idle
	// worker. Default 5.
	Publishes int
}

func (s IdleSpec) withDefaults() IdleSpec {
	s.Window = cmp.Or(s.Window, 20*time.Second)
	s.Warmup = cmp.Or(s.Warmup, 12*time.Second)
	s.Publishes = cmp.Or(s.Publishes, 5)
	return s
}

// IdleReport is what one worker with nothing to deliver sent Redis.
type IdleReport struct {
	Window time.Duration
	// Commands is the number of commands clients sent (those a script
	// ran inside it not counted: a managed Redis bills a script as one);
	// InScripts is the number run inside scripts.
	Commands, InScripts int
	// ByCommand and BySource count Commands by command name and by the
	// loop that sent it (asynq's processor, forwarder, heartbeater, …,
	// hooklane's dispatcher, rescuer, …); InScriptsBySource counts
	// InScripts by the loop whose script ran them.
	ByCommand, BySource, InScriptsBySource map[string]int
	// Connections is the number of client connections Redis had open
	// after the window, the measuring one not counted.
	Connections int
	// Servers is the number of asynq Servers the worker runs (those
	// asynq's heartbeats listed).
	Servers int
	// Latency is each publish's time from the call to the request's
	// arrival at the receiver.
	Latency []time.Duration
}

// PerSecond is Commands per second of the window.
func (r *IdleReport) PerSecond() float64 { return float64(r.Commands) / r.Window.Seconds() }

// MeasureIdle starts a worker (as cfg.Exec's `hooklane worker`, or in this
// process) with one subscriber and nothing to deliver on a redis-server of
// its own, counts the commands Redis receives for spec.Window with
// MONITOR, then times spec.Publishes publishes to that subscriber. It
// needs a Redis no other client uses: cfg.Redis unset (one is started) or
// an idle one server.
func MeasureIdle(ctx context.Context, cfg Config, spec IdleSpec) (*IdleReport, error) {
	cfg, spec = cfg.WithDefaults(), spec.withDefaults()
	if cfg.Cluster || cfg.Redis.IsCluster() || cfg.ExternalWorkers {
		return nil, errors.New("loadtest: the idle measurement runs one worker of its own on one redis-server")
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil { // its worker process logs there
		return nil, err
	}
	if !cfg.Redis.IsSet() {
		r, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
		if err != nil {
			return nil, err
		}
		defer r.Stop()
		cfg.Redis = deploy.RedisConfig{URL: r.URL}
	}
	rdb, err := cfg.Redis.NewClient(deploy.ClientTuning{})
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	defer rdb.Close()
	c, ok := rdb.(*redis.Client)
	if !ok {
		return nil, errors.New("loadtest: the idle measurement needs one redis-server")
	}
	e := &env{cfg: cfg, rdb: rdb, recv: NewReceiver(cfg.Logger), log: cfg.Logger}
	defer e.recv.Close()
	ns := e.namespace("idle")
	keys := tasks.Keys(ns)
	p, err := e.producer(ns)
	if err != nil {
		return nil, err
	}
	sub := subSpec{ID: "idle-1", Endpoint: Endpoint{Kind: Fast}, EventTypes: []string{"idle.ping"},
		Limit: limits.Limit{Rate: 100, Burst: 100, Period: time.Second}, MaxInFlight: 10}
	if err := e.register(ctx, p, sub); err != nil {
		return nil, err
	}
	w, err := e.startWorker(ctx, ns, 1)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = w.Stop()
		}
	}()
	rep := &IdleReport{Window: spec.Window, ByCommand: map[string]int{}, BySource: map[string]int{}, InScriptsBySource: map[string]int{}}
	if !waitFor(ctx, 30*time.Second, func() bool { return rdb.ZCard(ctx, "asynq:servers").Val() > 0 }) {
		return nil, errors.New("loadtest: the worker did not start its asynq Servers within 30s")
	}
	if !sleepCtx(ctx, spec.Warmup) {
		return nil, ctx.Err()
	}
	lines, err := monitor(ctx, c.Options().Addr, spec.Window)
	if err != nil {
		return nil, err
	}
	source := ""
	for _, l := range lines {
		m, ok := parseMonitor(l)
		switch {
		case !ok:
		case m.client == "lua":
			// MONITOR shows a script's commands after the script's own line.
			rep.InScripts++
			rep.InScriptsBySource[source]++
		default:
			source = idleSource(keys, []string{tasks.DefaultRegion}, []string{sub.ID}, m)
			rep.Commands++
			rep.ByCommand[m.args[0]]++
			rep.BySource[source]++
		}
	}
	rep.Servers = int(rdb.ZCard(ctx, "asynq:servers").Val())
	if n, err := clientCount(ctx, c); err == nil {
		rep.Connections = n - 1
	}
	for i := range spec.Publishes {
		if !sleepCtx(ctx, time.Second+rand.N(2*time.Second)) {
			return nil, ctx.Err()
		}
		id := fmt.Sprintf("idle-%d-%d", time.Now().UnixNano(), i)
		start := time.Now()
		if _, err := p.Publish(ctx, event(id, "idle.ping", i), nil); err != nil {
			return nil, err
		}
		var at time.Time
		if !waitFor(ctx, 30*time.Second, func() bool {
			for _, a := range e.recv.Arrivals(sub.ID) {
				if a.ID == id {
					at = a.At
					return true
				}
			}
			return false
		}) {
			return nil, fmt.Errorf("loadtest: event %s was not delivered within 30s", id)
		}
		rep.Latency = append(rep.Latency, at.Sub(start))
	}
	stopped = true
	_, err = w.Stop()
	return rep, err
}

// Print writes the report as a few lines of text.
func (r *IdleReport) Print(out io.Writer, command string) {
	fmt.Fprintf(out, "idle worker: %.1f commands/s (%d in %s; %d more run inside scripts), %d asynq Servers, %d connections\n",
		r.PerSecond(), r.Commands, r.Window, r.InScripts, r.Servers, r.Connections)
	if command != "" {
		fmt.Fprintf(out, "  (%s)\n", command)
	}
	print := func(title string, m map[string]int) {
		fmt.Fprintf(out, "%s:\n", title)
		names := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(m[b]-m[a], strings.Compare(a, b)) })
		for _, k := range names {
			fmt.Fprintf(out, "  %7.2f/s  %s\n", float64(m[k])/r.Window.Seconds(), k)
		}
	}
	print("by source", r.BySource)
	print("inside scripts, by source", r.InScriptsBySource)
	print("by command", r.ByCommand)
	if len(r.Latency) > 0 {
		var ms []string
		for _, l := range r.Latency {
			ms = append(ms, fmt.Sprintf("%.0fms", float64(l)/float64(time.Millisecond)))
		}
		fmt.Fprintf(out, "publish to delivery on the idle worker: %s (max %s)\n", strings.Join(ms, " "), slices.Max(r.Latency).Round(time.Millisecond))
	}
}

// monitor returns the lines MONITOR shows at addr for d (the commands of
// every client, those run inside scripts with the client "lua").
func monitor(ctx context.Context, addr string, d time.Duration) ([]string, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	var (
		mu    sync.Mutex
		lines []string
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for first := true; sc.Scan(); first = false {
			if first && sc.Text() == "+OK" {
				continue
			}
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	})
	ok := sleepCtx(ctx, d)
	conn.Close()
	wg.Wait()
	if !ok {
		return nil, ctx.Err()
	}
	return lines, nil
}

// clientCount is the number of connections Redis has, this client's
// included.
func clientCount(ctx context.Context, c *redis.Client) (int, error) {
	list, err := c.ClientList(ctx).Result()
	return strings.Count(list, "\n"), err
}
