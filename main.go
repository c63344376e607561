// Command hooklane delivers webhooks. Subcommands:
//
//	hooklane worker   deliver queued events (config from the environment; see deploy/CONFIGURATION.md)
//	hooklane web      the API, the asynqmon UI and /metrics on $PORT
//	hooklane migrate  carry over what the release before wrote since the upgrade
//	hooklane dev      own Redis, worker, web and a demo (what `make run` runs; -fresh, -redis-port)
//	hooklane bench    the load harness (deploy/loadtest); -h lists its flags
//	hooklane publish|subscribers|dead-letters …   operator commands over the API
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/hooklane/hooklane/deploy/loadtest"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/web/cli"
	"github.com/hooklane/hooklane/web/dev"
	"github.com/hooklane/hooklane/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, cli.ErrUsage) {
			err = fmt.Errorf("%w\nusage: hooklane worker|web|dev|bench|migrate\n%s", err, cli.Usage)
		}
		fmt.Fprintln(os.Stderr, "hooklane:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	level, err := logLevel(os.Getenv("HOOKLANE_LOG_LEVEL"), len(args) > 0 && args[0] == "dev")
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	switch {
	case len(args) == 1 && args[0] == "worker":
		if os.Getenv("GOGC") == "" {
			// A delivery allocates much that dies young: a collection
			// every 200% of heap growth instead of 100% costs some MiB of
			// memory and saves CPU (deploy/BENCHMARKS-HISTORY.md, "What costs what").
			debug.SetGCPercent(200)
		}
		cfg, err := worker.FromEnv()
		if err != nil {
			return err
		}
		cfg.Logger = log
		w, err := worker.New(cfg)
		if err != nil {
			return err
		}
		return w.Run(ctx)
	case len(args) == 1 && args[0] == "migrate":
		cfg, err := worker.FromEnv()
		if err != nil {
			return err
		}
		cfg.Logger = log
		return worker.Migrate(ctx, cfg, os.Stdout)
	case len(args) == 1 && args[0] == "web":
		cfg, err := web.FromEnv()
		if err != nil {
			return err
		}
		cfg.Logger = log
		s, err := web.New(cfg)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	case len(args) > 0 && args[0] == "dev":
		o, err := devOptions(args[1:])
		if err != nil {
			return err
		}
		o.Getenv, o.Out, o.Logger = os.Getenv, os.Stdout, log
		return dev.Run(ctx, o)
	case len(args) > 0 && args[0] == "bench":
		exe, err := os.Executable() // the workers it starts are this binary's `worker`
		if err != nil {
			return err
		}
		return loadtest.Command(ctx, args[1:], exe, os.Stdout, os.Stderr)
	case len(args) > 0 && cli.IsCommand(args[0]):
		return cli.Run(ctx, args, os.Stdout, os.Getenv)
	}
	return cli.ErrUsage
}

// devOptions reads `hooklane dev`'s flags.
func devOptions(args []string) (dev.Options, error) {
	var o dev.Options
	fs := flag.NewFlagSet("hooklane dev", flag.ContinueOnError)
	fs.BoolVar(&o.Fresh, "fresh", false, "start from zero: a new token, and the own Redis' data (.hooklane/dev) deleted")
	fs.IntVar(&o.RedisPort, "redis-port", 6379, "the port of the redis-server dev mode starts on 127.0.0.1 when REDIS_URL is not set")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("hooklane dev [-fresh] [-redis-port N]: unexpected %q", strings.Join(fs.Args(), " "))
	}
	if o.RedisPort < 1 || o.RedisPort > 65535 {
		return o, fmt.Errorf("hooklane dev: -redis-port %d: want 1-65535", o.RedisPort)
	}
	return o, nil
}

// logLevel reads HOOKLANE_LOG_LEVEL (debug, info, warn, error). Unset, it
// is info, or for the demo error: the demo prints its progress, and each
// dead letter it makes on purpose would be a warning.
func logLevel(v string, demo bool) (slog.Level, error) {
	var level slog.Level
	if v == "" {
		if demo {
			return slog.LevelError, nil
		}
		return slog.LevelInfo, nil
	}
	if err := level.UnmarshalText([]byte(v)); err != nil {
		return 0, fmt.Errorf("HOOKLANE_LOG_LEVEL=%q: want debug, info, warn or error", v)
	}
	return level, nil
}
