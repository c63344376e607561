package loadtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/hooklane/hooklane/deploy"
)

// Command is `hooklane bench`: it parses args and runs the scenarios, or,
// with -serve-floor, serves the floor (how Run starts it as a subprocess).
// exe is the hooklane binary, whose `worker` subcommand runs the workers.
func Command(ctx context.Context, args []string, exe string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hooklane bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c          Config
		scenarios  = fs.String("scenarios", strings.Join(DefaultScenarios, ","), "scenarios to run, comma-separated, in order")
		inProcess  = fs.Bool("in-process", false, "run workers and the floor inside this process instead of as subprocesses (no RSS figures)")
		serveFloor = fs.Bool("serve-floor", false, "internal: serve the floor on -floor-queue until stopped")
		floorQueue = fs.String("floor-queue", "", "internal: the floor's queue")
		verbose    = fs.Bool("v", false, "log at debug level")
		cpuProfile = fs.String("cpuprofile", "", "write this process's CPU profile here (with -in-process it covers the worker too)")
		idle       = fs.Duration("idle", 0, "instead of the scenarios: count for this long the Redis commands of one worker with nothing to deliver, then time 5 publishes to it (deploy/BENCHMARKS.md, \"Idle cost\")")
	)
	fs.StringVar(&c.Out, "out", ".hooklane/bench", "folder for report.json, summary.txt, charts and worker logs")
	fs.Float64Var(&c.Scale, "scale", 1, "multiply event counts and the spike ladder's rates")
	fs.DurationVar(&c.Hold, "hold", 30*time.Second, "how long each spike of the ladder is held")
	fs.IntVar(&c.Worker.Concurrency, "concurrency", 200, "worker (and floor) concurrency, per asynq Server")
	fs.IntVar(&c.Workers, "workers", 1, "worker processes per scenario (in-process Workers with -in-process)")
	fs.IntVar(&c.Worker.Shards, "shards", 0, "delivery queues per lane (HOOKLANE_QUEUE_SHARDS of the workers and the harness' producer); 0: the namespace's default, 1 on one Redis, 6 on a Cluster")
	fs.IntVar(&c.ThroughputSubscribers, "tput-subscribers", 10, "fast subscribers of the throughput scenario, 2,000 × scale events each")
	fs.IntVar(&c.FloorServers, "floor-servers", 1, "asynq Servers of a second floor process, run beside the one-Server floor when above 1")
	fs.BoolVar(&c.Cluster, "cluster", false, "start a 3-master Redis Cluster on 127.0.0.1 instead of one redis-server")
	redisURL := fs.String("redis-url", "", "use this Redis instead of starting one on 127.0.0.1")
	clusterAddrs := fs.String("redis-cluster-addrs", "", "use this Redis Cluster (comma-separated seed host:port) instead of starting a Redis")
	fs.BoolVar(&c.ExternalWorkers, "external-workers", false, "start no worker: a deployment's workers consume -namespace (needs -redis-url or -redis-cluster-addrs)")
	fs.StringVar(&c.Namespace, "namespace", "bench", "namespace prefix (with -external-workers: the deployment's namespace)")
	fs.BoolVar(&c.ViralExtras, "viral-extras", false, "add a flaky and a gone subscriber to the viral burst")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "longest wait for one scenario's queue to settle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Zero would read as "default" in Config.
	if c.Scale <= 0 {
		return errors.New("hooklane bench: -scale must be positive")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"workers", c.Workers}, {"tput-subscribers", c.ThroughputSubscribers}, {"floor-servers", c.FloorServers}, {"concurrency", c.Worker.Concurrency}} {
		if f.v < 1 {
			return fmt.Errorf("hooklane bench: -%s must be at least 1, not %d", f.name, f.v)
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("hooklane bench: unexpected arguments %q", fs.Args())
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *serveFloor {
		// Run hands the floor its Redis as environment variables, as it
		// does a worker (see startFloor).
		rc, err := deploy.RedisFromEnv(os.Getenv)
		if err != nil {
			return err
		}
		return ServeFloor(ctx, FloorConfig{RedisConfig: rc, Queue: *floorQueue, Concurrency: c.Worker.Concurrency, Servers: c.FloorServers})
	}
	// The flags read as the variables they stand for, so that they are
	// parsed and checked alike (two at once is an error).
	var err error
	c.Redis, err = deploy.RedisFromEnv(func(name string) string {
		return map[string]string{deploy.EnvRedisURL: *redisURL, deploy.EnvRedisClusterAddrs: *clusterAddrs}[name]
	})
	if err != nil {
		return fmt.Errorf("hooklane bench: -redis-url, -redis-cluster-addrs: %w", err)
	}
	for s := range strings.SplitSeq(*scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.Scenarios = append(c.Scenarios, s)
		}
	}
	if !*inProcess {
		c.Exec = exe
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	c.Command = strings.TrimSpace("hooklane bench " + strings.Join(args, " "))
	if *idle > 0 {
		rep, err := MeasureIdle(ctx, c, IdleSpec{Window: *idle})
		if err != nil {
			return err
		}
		rep.Print(stdout, c.Command)
		return nil
	}
	rep, err := Run(ctx, c, stdout)
	if err != nil {
		return err
	}
	for _, r := range rep.Scenarios {
		if !r.Passed {
			return fmt.Errorf("scenario %s broke an invariant; see %s/summary.txt", r.Name, c.WithDefaults().Out)
		}
	}
	return nil
}
