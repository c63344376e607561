package dev

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/web/cli"
	"github.com/hooklane/hooklane/worker"
)

// Options configures Run.
type Options struct {
	// Getenv reads the Redis variables (deploy.RedisFromEnv), PORT,
	// HOOKLANE_API_TOKEN and HOOKLANE_NAMESPACE; the worker's other
	// variables come from the process environment (worker.FromEnv).
	Getenv func(string) string
	// Out gets the banner: the console's and asynqmon's addresses and the token.
	Out io.Writer
	// Logger gets the processes' logs.
	Logger *slog.Logger
	// DataDir keeps what a run leaves to the next: the API token (token)
	// and the own Redis' data (redis/). Default ".hooklane/dev".
	DataDir string
	// RedisPort is the port of the own redis-server on 127.0.0.1, when no
	// Redis is configured. Default 6379, where `hooklane worker` and the
	// SDK look by default.
	RedisPort int
	// Fresh starts from zero: a new token, and the own Redis' data
	// deleted. With a Redis configured it is an error: that Redis is not
	// dev mode's to empty.
	Fresh bool
	// Events is the demo's burst. Default 120: demo-limited's share lasts
	// the first minute at its receiver's 2/s. Negative: no demo.
	Events int
}

// Run is `make run`: it starts its own redis-server unless a Redis is
// configured (REDIS_URL, a Cluster or Sentinel), a worker and the web
// process on 127.0.0.1:$PORT, and a demo receiver with three subscribers,
// publishes a burst of events, prints where to look, and runs until ctx is
// done. The token and the Redis data are kept in DataDir for the next run
// (deploy.LocalRedis says how a Redis is known to be dev mode's own and
// why a foreign one is refused).
func Run(ctx context.Context, o Options) error {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	o.DataDir = cmp.Or(o.DataDir, ".hooklane/dev")
	o.RedisPort = cmp.Or(o.RedisPort, 6379)
	o.Events = cmp.Or(o.Events, 120)
	log := o.Logger

	rc, err := deploy.RedisFromEnv(o.Getenv)
	if err != nil {
		return err
	}
	if rc.IsSet() && o.Fresh {
		return errors.New("-fresh empties only the Redis hooklane dev starts itself; with a Redis configured (REDIS_URL, a Cluster or Sentinel), empty it yourself or set HOOKLANE_NAMESPACE to a new name, and run without -fresh")
	}
	// The web port first: a second run beside this one stops here, before
	// it could touch the first one's Redis.
	ln, err := net.Listen("tcp", "127.0.0.1:"+cmp.Or(o.Getenv("PORT"), "8080"))
	if err != nil {
		return fmt.Errorf("web: %w (set PORT to use another port)", err)
	}
	redisNote, own := "the one configured", !rc.IsSet()
	if own {
		r, err := deploy.LocalRedis(ctx, filepath.Join(o.DataDir, "redis"), o.RedisPort, o.Fresh)
		if err != nil {
			ln.Close()
			return err
		}
		defer r.Stop()
		rc = deploy.RedisConfig{URL: r.URL}
		redisNote = r.URL + ", data in " + r.Dir
		log.Info("started own redis", "url", r.URL, "dir", r.Dir)
	}
	token, err := devToken(o)
	if err != nil {
		ln.Close()
		return err
	}
	// The demo receiver is on loopback: its subscribers name 127.0.0.1,
	// which the web process and the worker allow here; production stays
	// closed.
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	srv, err := web.New(web.Config{Addr: ln.Addr().String(), Token: token, RedisConfig: rc,
		Namespace: o.Getenv("HOOKLANE_NAMESPACE"), Logger: log.With("process", "web"), AllowedCIDRs: loopback})
	if err != nil {
		ln.Close()
		return err
	}

	wcfg, err := worker.FromEnv()
	if err != nil {
		srv.Close()
		ln.Close()
		return err
	}
	wcfg.RedisConfig, wcfg.Logger = rc, log.With("process", "worker")
	wcfg.Namespace = cmp.Or(o.Getenv("HOOKLANE_NAMESPACE"), wcfg.Namespace)
	// Quick retries, so that the down subscriber's events reach the dead
	// letters within seconds instead of the production backoff's hours.
	wcfg.BackoffBase = cmp.Or(wcfg.BackoffBase, time.Second)
	wcfg.BackoffMax = cmp.Or(wcfg.BackoffMax, 5*time.Second)
	if wcfg.AllowedCIDRs == nil {
		wcfg.AllowedCIDRs = loopback
	}
	w, err := worker.New(wcfg)
	if err != nil {
		srv.Close()
		ln.Close()
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type exit struct {
		name string
		err  error
	}
	exits := make(chan exit, 2)
	go func() { exits <- exit{"web", srv.Serve(ctx, ln)} }()
	go func() { exits <- exit{"worker", w.Run(ctx)} }()
	// stop ends both processes and returns their errors; got are exits
	// already received.
	stop := func(got ...exit) error {
		cancel()
		for len(got) < 2 {
			got = append(got, <-exits)
		}
		var errs []error
		for _, e := range got {
			if e.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", e.name, e.err))
			}
		}
		return errors.Join(errs...)
	}

	base := "http://" + ln.Addr().String()
	if o.Events > 0 {
		rcv, err := StartReceiver(2)
		if err != nil {
			return errors.Join(err, stop())
		}
		defer rcv.Close()
		if err := Demo(ctx, cli.NewClient(base, token), rcv, o.Events); err != nil {
			return errors.Join(err, stop())
		}
	}
	fmt.Fprintf(o.Out, `
  hooklane is running.
    console       %[1]s/console/   (user: anything, password: %[2]s)
                  or open %[4]s
    asynqmon UI   %[1]s/monitoring/   (user: anything, password: %[2]s)
                  or open %[3]s
    API           curl -H 'Authorization: Bearer %[2]s' %[1]s/v1/subscribers
    CLI           HOOKLANE_API_TOKEN=%[2]s go run . subscribers status demo-limited
    metrics       curl -H 'Authorization: Bearer %[2]s' %[1]s/metrics
    Redis         %[5]s
  %[6]s
  Within a minute: demo-fast delivered; demo-limited, registered at 10/s, sent
  at its receiver's 2/s learnt from the first 429s (its rate in the lines below);
  demo-down's breaker open (subscribers status demo-down), its first events in
  the dead letters (console: demo-down; asynqmon: Archived tab), the rest held.
  Ctrl-C stops everything.

`, base, token, "http://hooklane:"+token+"@"+ln.Addr().String()+"/monitoring/",
		"http://hooklane:"+token+"@"+ln.Addr().String()+"/console/", redisNote, keptNote(o, own))
	if o.Events > 0 {
		go progress(ctx, cli.NewClient(base, token), o.Out, 3*time.Second)
	}
	select {
	case <-ctx.Done():
		return stop()
	case e := <-exits: // one process ended early: stop the other
		return stop(e)
	}
}

// keptNote says what the next run keeps of this one; own: dev mode
// started its Redis.
func keptNote(o Options, own bool) string {
	tok := "The token (kept in " + filepath.Join(o.DataDir, "token") + ")"
	if o.Getenv("HOOKLANE_API_TOKEN") != "" {
		tok = "The token (HOOKLANE_API_TOKEN)"
	}
	if !own {
		return tok + " stays for the next run, and the configured Redis keeps its data."
	}
	return tok + " and the Redis data stay for the next run;\n  make run-fresh (hooklane dev -fresh) starts from zero."
}

// progress prints the demo subscribers' counts every interval while they
// change, so the terminal tells the same story as the UI.
func progress(ctx context.Context, c *cli.Client, out io.Writer, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		line := ""
		for _, id := range []string{"demo-fast", "demo-limited", "demo-down"} {
			st, err := c.Status(ctx, id)
			if err != nil {
				break
			}
			// In the words of a delivery's state (tasks.States): delivered
			// and dead all-time, the rest waiting now.
			c := st.Counts
			line += fmt.Sprintf("  %s: %d delivered, %d dead; waiting: %d scheduled, %d retrying, %d cooling, %d held", id,
				c.Delivered, c.Dead, c.Scheduled, c.Retrying, c.Cooling, c.Held)
			if st.CoolingUntil != nil {
				line += fmt.Sprintf(" (429: cooling %ds)", int(time.Until(*st.CoolingUntil).Seconds()+0.5))
			}
			if e := st.EffectiveRate; e.Reason != "" {
				line += fmt.Sprintf(" (sent at %.2f/%s: %s)", e.Rate, strings.ToLower(strings.TrimPrefix(e.Period, "PT")), e.Reason)
			}
			if st.Breaker.State != "closed" {
				line += " (breaker " + st.Breaker.State + ")"
			}
		}
		if line != "" && line != last {
			fmt.Fprintf(out, "%s%s\n", time.Now().Format("15:04:05"), line)
			last = line
		}
	}
}
