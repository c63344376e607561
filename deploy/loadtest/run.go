package loadtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/worker"
)

// Scenario names.
const (
	ScenarioViral      = "viral"
	ScenarioSpike      = "spike"
	ScenarioThroughput = "throughput"
	ScenarioLimited    = "limited"
	ScenarioTrickle    = "trickle"
	ScenarioTenants    = "tenants"
)

// DefaultScenarios are every scenario, in the order a run without
// Config.Scenarios (make bench) runs them.
var DefaultScenarios = []string{ScenarioViral, ScenarioSpike, ScenarioThroughput, ScenarioLimited, ScenarioTrickle, ScenarioTenants}

// Config configures a run. Zero fields take the defaults named.
type Config struct {
	// Out is the folder for report.json, summary.txt, the charts and the
	// subprocesses' logs. Default ".hooklane/bench".
	Out string
	// Scenarios to run, in this order. Default DefaultScenarios: viral,
	// spike, throughput, limited, trickle, tenants.
	Scenarios []string
	// Scale multiplies event counts and the spike ladder's rates. Default 1.
	Scale float64
	// Hold is how long each spike of the ladder is held. Default 30s.
	Hold time.Duration
	// Exec is the hooklane binary. When set, each scenario's worker runs as
	// `hooklane worker` (configured by its environment variables) and the
	// floor as `hooklane bench -serve-floor`, so that their peak RSS is
	// theirs alone. Empty: both run in this process (the tests).
	Exec string
	// Redis is an existing Redis to use (one server, a Cluster or
	// Sentinel); no mode set starts a redis-server on a free 127.0.0.1
	// port for the run. Subprocess workers get it as environment variables.
	Redis deploy.RedisConfig
	// Cluster starts a Redis Cluster of ClusterMasters masters on 127.0.0.1
	// for the run instead of one redis-server; Redis must then be unset.
	Cluster bool
	// ExternalWorkers starts no worker: a deployment's workers, consuming
	// Namespace, deliver. Scenarios then share Namespace and the floor is
	// not run.
	ExternalWorkers bool
	// Workers is the number of workers every scenario runs, each a process
	// of its own (in-process Workers without Exec). Default 1.
	Workers int
	// FloorServers is the number of asynq Servers of a second floor, in one
	// process like the first (which has one), to compare with hooklane's
	// several Servers per process: with more than 1, each throughput round
	// drains a backlog with both floors. Default 1: the one-Server floor
	// only.
	FloorServers int
	// ThroughputSubscribers is the number of fast subscribers of the
	// throughput scenario, each getting 2,000 × Scale events per round.
	// Default 10.
	ThroughputSubscribers int
	// Namespace is the prefix of each scenario's namespace ("bench-viral"…),
	// or the namespace itself with ExternalWorkers. Default "bench".
	Namespace string
	// Worker is the started workers' configuration (Redis and Namespace
	// are set per scenario); its Concurrency is the floor's too, and its
	// Shards (0: the namespace's default, see deploy.EnsureLayout) the
	// harness' producer's. AllowedCIDRs defaults to 127.0.0.0/8, where the
	// receiver is.
	Worker worker.Config
	// Slack is the gap allowed between a limiter's decision and the
	// request's arrival when checking burst + rate·t. Default 20ms.
	Slack time.Duration
	// MaxLag is the receiver's timer lag (p99) above which a run is
	// invalid: the harness was starved. Default 100ms.
	MaxLag time.Duration
	// Timeout caps each scenario's wait for its queue to settle. Default 10m.
	Timeout time.Duration
	// Viral, Spike, Throughput, Limited, Trickle and Tenants override the
	// scenarios' sizes.
	Viral      *ViralSpec
	Spike      *SpikeSpec
	Throughput *ThroughputSpec
	Limited    *LimitedSpec
	Trickle    *TrickleSpec
	Tenants    *TenantsSpec
	// ViralExtras adds a flaky and a gone subscriber to the viral burst.
	ViralExtras bool
	// Command is recorded in the report: how to repeat the run.
	Command string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Out = cmp.Or(c.Out, ".hooklane/bench")
	if len(c.Scenarios) == 0 {
		c.Scenarios = slices.Clone(DefaultScenarios)
	}
	c.Scale = cmp.Or(c.Scale, 1)
	c.Hold = cmp.Or(c.Hold, 30*time.Second)
	c.Namespace = cmp.Or(c.Namespace, "bench")
	c.Slack = cmp.Or(c.Slack, 20*time.Millisecond)
	c.MaxLag = cmp.Or(c.MaxLag, 100*time.Millisecond)
	c.Timeout = cmp.Or(c.Timeout, 10*time.Minute)
	c.Workers = cmp.Or(c.Workers, 1)
	c.FloorServers = cmp.Or(c.FloorServers, 1)
	c.ThroughputSubscribers = cmp.Or(c.ThroughputSubscribers, 10)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Worker.Logger == nil {
		c.Worker.Logger = c.Logger.With("component", "worker")
	}
	if c.Worker.AllowedCIDRs == nil {
		// The receiver is on 127.0.0.1, which the SSRF guard refuses unless
		// allowed; nothing else is.
		c.Worker.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	c.Worker = c.Worker.WithDefaults()
	return c
}

func (c Config) validate() error {
	for _, s := range c.Scenarios {
		if !slices.Contains(DefaultScenarios, s) {
			return fmt.Errorf("loadtest: Scenarios: unknown scenario %q (want %s)", s, strings.Join(DefaultScenarios, ", "))
		}
	}
	switch {
	case c.Scale <= 0 || c.Scale > 100:
		return errors.New("loadtest: Scale must be in (0, 100]")
	case c.Hold < time.Second || c.Hold > 10*time.Minute:
		return errors.New("loadtest: Hold must be between 1s and 10m")
	case c.ExternalWorkers && !c.Redis.IsSet():
		return errors.New("loadtest: ExternalWorkers needs Redis: the Redis those workers use")
	case c.Cluster && c.Redis.IsSet():
		return fmt.Errorf("loadtest: Cluster starts a Redis Cluster of its own, but Redis is set (%s): choose one", c.Redis.Mode())
	case c.Workers < 1 || c.Workers > maxProcs:
		return fmt.Errorf("loadtest: Workers must be 1-%d, not %d", maxProcs, c.Workers)
	case c.ExternalWorkers && c.Workers > 1:
		return errors.New("loadtest: Workers counts the workers the harness starts; with ExternalWorkers it starts none")
	case c.FloorServers < 1 || c.FloorServers > maxProcs:
		return fmt.Errorf("loadtest: FloorServers must be 1-%d, not %d", maxProcs, c.FloorServers)
	case c.ThroughputSubscribers < 1 || c.ThroughputSubscribers > 1000:
		return fmt.Errorf("loadtest: ThroughputSubscribers must be 1-1000, not %d", c.ThroughputSubscribers)
	case c.Worker.Shards < 0 || c.Worker.Shards > 256:
		return fmt.Errorf("loadtest: Worker.Shards must be 0 (the namespace's default) or 1-256, not %d", c.Worker.Shards)
	}
	if err := c.Redis.Validate(); err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	return nil
}

// maxProcs caps Workers and FloorServers: more is a typo on one machine.
const maxProcs = 64

// ClusterMasters is the number of masters of the Cluster Config.Cluster
// starts.
const ClusterMasters = 3

// Run runs the scenarios, writes the report into Config.Out and the
// summary to summary (if not nil), and returns the report. A scenario
// that breaks an invariant does not stop the run; the report says so.
func Run(ctx context.Context, cfg Config, summary io.Writer) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	started := !cfg.Redis.IsSet()
	switch {
	case cfg.Cluster:
		c, err := deploy.StartCluster(ctx, deploy.ClusterOpts{Masters: ClusterMasters, Dir: filepath.Join(cfg.Out, "cluster")})
		if err != nil {
			return nil, err
		}
		defer c.Stop()
		cfg.Redis = deploy.RedisConfig{ClusterAddrs: c.Addrs}
	case started:
		r, err := deploy.StartRedis(ctx, deploy.RedisOpts{Dir: filepath.Join(cfg.Out, "redis")})
		if err != nil {
			return nil, err
		}
		defer r.Stop()
		cfg.Redis = deploy.RedisConfig{URL: r.URL}
	}
	rdb, err := cfg.Redis.NewClient(deploy.ClientTuning{PoolSize: 128})
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	defer rdb.Close()
	obs, err := cfg.Redis.NewClient(deploy.ClientTuning{PoolSize: 4})
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	defer obs.Close()
	e := &env{cfg: cfg, rdb: rdb, obs: obs, seen: observerOf(obs), recv: NewReceiver(cfg.Logger), probe: &lagProbe{}, log: cfg.Logger}
	defer e.recv.Close()
	pctx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	go e.probe.run(pctx)

	top, err := e.topology(ctx, started)
	if err != nil {
		return nil, fmt.Errorf("loadtest: reading the Redis topology: %w", err)
	}
	rep := &Report{Started: time.Now().UTC(), Command: cfg.Command, Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
		Settings: map[string]string{"scale": strconv.FormatFloat(cfg.Scale, 'g', -1, 64), "hold": cfg.Hold.String(),
			"concurrency": strconv.Itoa(cfg.Worker.Concurrency), "worker": workerMode(cfg), "slack": cfg.Slack.String()},
		Topology: top}
	for _, name := range cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		r := &ScenarioReport{Name: name}
		cfg.Logger.Info("scenario starting", "scenario", name)
		switch name {
		case ScenarioViral:
			err = e.runViral(ctx, r)
		case ScenarioSpike:
			err = e.runSpike(ctx, r)
		case ScenarioThroughput:
			err = e.runThroughput(ctx, r)
		case ScenarioLimited:
			err = e.runLimited(ctx, r)
		case ScenarioTrickle:
			err = e.runTrickle(ctx, r)
		case ScenarioTenants:
			err = e.runTenants(ctx, r)
		}
		if err != nil {
			return rep, fmt.Errorf("scenario %s: %w", name, err)
		}
		cfg.Logger.Info("scenario done", "scenario", name, "valid", r.Valid, "passed", r.Passed, "wall_s", math.Round(r.WallSeconds))
		rep.Scenarios = append(rep.Scenarios, r)
	}
	return rep, rep.write(cfg.Out, summary)
}

func workerMode(c Config) string {
	switch {
	case c.ExternalWorkers:
		return "external"
	case c.Exec != "":
		return "subprocess"
	}
	return "in-process"
}

func (e *env) namespace(name string) string {
	if e.cfg.ExternalWorkers {
		return e.cfg.Namespace
	}
	return e.cfg.Namespace + "-" + name
}

// run is one scenario's moving parts, handed to its body.
type run struct {
	ns    string
	p     *producer.Producer
	gen   *Generator
	led   *Ledger
	start time.Time
	// phases, if set by the body, reads the outcomes after collect.
	phases func(map[string]*outcome)
}

// scenario runs body against a fresh namespace with a worker running:
// it snapshots Redis' counters, samples the queue every second, waits for
// the queue to settle after body returns, and fills r.
func (e *env) scenario(ctx context.Context, r *ScenarioReport, name string, subs []subSpec, body func(context.Context, *run) error) error {
	ns := e.namespace(name)
	p, err := e.producer(ns)
	if err != nil {
		return err
	}
	led := newLedger()
	sc := &run{ns: ns, p: p, gen: &Generator{P: p, Ledger: led}, led: led}
	before, err := e.redisSnapshot(ctx)
	if err != nil {
		return err
	}
	seen0 := e.seen.snapshot()
	w, err := e.startWorkers(ctx, ns)
	if err != nil {
		return err
	}
	e.probe.take()
	sc.start = time.Now()
	self0 := selfCPU()
	sctx, stopSampler := context.WithCancel(ctx)
	smp, sdone := &sampler{}, make(chan struct{})
	go func() { smp.run(sctx, e.look(), func() stock { return e.stockOf(sctx, ns) }, sc.start); close(sdone) }()

	berr := body(ctx, sc)
	var expect float64
	for _, s := range subs {
		expect = math.Max(expect, s.minDrain(led.Count(s.ID)))
	}
	timeout := min(e.cfg.Timeout, time.Duration((3*expect+60)*float64(time.Second)))
	if berr == nil && !waitFor(ctx, timeout, func() bool { return e.settled(ctx, e.stockOf(ctx, ns)) }) {
		r.Notes = append(r.Notes, fmt.Sprintf("queue did not settle within %s", timeout.Round(time.Second)))
	}
	end := time.Now()
	after, serr := e.redisSnapshot(ctx)
	seen1 := e.seen.snapshot()
	wcpu, wstats, self := w.CPU(), w.stats(), selfCPU()-self0
	stopSampler()
	<-sdone
	rss, werr := w.Stop()
	if err := errors.Join(berr, serr, werr); err != nil {
		return err
	}
	r.Workers = withPeaks(wstats, rss)
	r.WorkerPeakRSSMiB = sumRSS(r.Workers)
	r.QueueShards = e.shardsOf(ctx, ns)
	p99, worst, stalls := e.probe.take()
	r.ProbeP99Ms, r.ProbeMaxMs = ms(p99), ms(worst)
	e.stalls = stalls
	r.Queue = smp.get()
	outs, err := e.collect(ctx, r, ns, subs, led, sc.start, end)
	if err != nil {
		return err
	}
	if sc.phases != nil {
		sc.phases(outs)
	}
	d, harness := after.sub(before).without(seen0, seen1)
	r.Redis = redisCost(d, r.Delivered, true)
	if r.Delivered > 0 {
		r.Redis.HarnessCommandsPerDelivery = float64(harness) / float64(r.Delivered)
	}
	r.WorkerCPUPerDelivery, r.HarnessCPUPerDelivery = perDelivery(wcpu, r.Delivered), perDelivery(self, r.Delivered)
	r.WallSeconds = end.Sub(sc.start).Seconds()
	if err := e.chart(r); err != nil {
		r.Notes = append(r.Notes, "chart: "+err.Error())
	}
	if e.cfg.ExternalWorkers {
		for _, s := range subs {
			_ = p.DeleteSubscriber(ctx, s.stored()) // the deployment keeps no bench subscribers
		}
	}
	r.finish(ms(e.cfg.MaxLag))
	return nil
}

// producer is the harness' producer on namespace ns.
func (e *env) producer(ns string) (*producer.Producer, error) {
	// HOOKLANE_BATCH_AFTER as hooklane web reads it: the harness' producer
	// stands for the web processes
	after := 0
	if v := os.Getenv("HOOKLANE_BATCH_AFTER"); v != "" {
		var err error
		if after, err = producer.ParseBatchAfter(v); err != nil {
			return nil, fmt.Errorf("HOOKLANE_BATCH_AFTER=%q: %w", v, err)
		}
	}
	return producer.New(&producer.Config{Redis: e.rdb, Namespace: ns, Shards: e.cfg.Worker.Shards, Logger: e.log, AllowedCIDRs: e.cfg.Worker.AllowedCIDRs,
		MaxWait: e.cfg.Worker.MaxWait, BatchAfter: after})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
