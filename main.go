// Command hooklane delivers webhooks. Subcommands:
//
//	hooklane worker   deliver queued events (config from the environment; see README)
//	hooklane dev      like worker, but starts a local redis-server when REDIS_URL is unset
//	hooklane bench    the load harness (deploy/loadtest); -h lists its flags
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/loadtest"
	"github.com/hooklane/hooklane/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hooklane:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "bench" {
		exe, err := os.Executable() // the workers it starts are this binary's `worker`
		if err != nil {
			return err
		}
		return loadtest.Command(ctx, args[1:], exe, os.Stdout, os.Stderr)
	}
	if len(args) != 1 || (args[0] != "worker" && args[0] != "dev") {
		return fmt.Errorf("usage: hooklane worker|dev|bench")
	}
	cfg, err := worker.FromEnv()
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if args[0] == "dev" && cfg.RedisURL == "" {
		r, err := deploy.LocalRedis(ctx, ".hooklane/redis")
		if err != nil {
			return err
		}
		defer r.Stop()
		cfg.RedisURL = r.URL
		cfg.Logger.Info("using local redis", "url", r.URL, "started_here", r.Dir != "")
	}
	if args[0] == "dev" && cfg.AllowedCIDRs == nil {
		// Local experiments deliver to local receivers; production stays closed.
		cfg.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	w, err := worker.New(cfg)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
