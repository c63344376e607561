package dev

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
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
	// DataDir holds the local Redis' data. Default ".hooklane/redis".
	DataDir string
	// Events is the demo's burst. Default 120: demo-limited's share lasts
	// the first minute at its receiver's 2/s. Negative: no demo.
	Events int
}

// Run is `make run`: it starts (or reuses) a local redis-server unless a
// Redis is configured (REDIS_URL, a Cluster or Sentinel), a worker and the
// web process on 127.0.0.1:$PORT, and a demo receiver with three
// subscribers, publishes a burst of events, prints where to look, and runs
// until ctx is done.
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
	o.DataDir = cmp.Or(o.DataDir, ".hooklane/redis")
	o.Events = cmp.Or(o.Events, 120)
	log := o.Logger

	rc, err := deploy.RedisFromEnv(o.Getenv)
	if err != nil {
		return err
	}
	if !rc.IsSet() {
		r, err := deploy.LocalRedis(ctx, o.DataDir)
		if err != nil {
			return err
		}
		defer r.Stop()
		rc = deploy.RedisConfig{URL: r.URL}
		log.Info("using local redis", "url", r.URL, "started_here", r.Dir != "")
	}
	token := o.Getenv("HOOKLANE_API_TOKEN")
	if token == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		token = "dev-" + hex.EncodeToString(b[:])
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+cmp.Or(o.Getenv("PORT"), "8080"))
	if err != nil {
		return fmt.Errorf("web: %w (set PORT to use another port)", err)
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
  Within a minute: demo-fast delivered; demo-limited, registered at 10/s, sent
  at its receiver's 2/s learnt from the first 429s (its rate in the lines below);
  demo-down's breaker open (subscribers status demo-down), its first events in
  the dead letters (console: demo-down; asynqmon: Archived tab), the rest held.
  Ctrl-C stops everything.

`, base, token, "http://hooklane:"+token+"@"+ln.Addr().String()+"/monitoring/",
		"http://hooklane:"+token+"@"+ln.Addr().String()+"/console/")
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
			// scheduled: parked, never tried yet (the reminders due later, a
			// backlog waiting for its rate); retrying: parked after a request
			line += fmt.Sprintf("  %s: %d delivered, %d scheduled, %d retrying, %d dead", id, st.Counts.Delivered,
				st.Counts.Scheduled, st.Counts.Retrying, st.Counts.Dead)
			if st.CoolingUntil != nil {
				line += fmt.Sprintf(" (429: cooling %ds)", int(time.Until(*st.CoolingUntil).Seconds()+0.5))
			}
			if e := st.EffectiveRate; e.Reason != "" {
				line += fmt.Sprintf(" (sent at %.2f/%s: %s)", e.Rate, e.Period, e.Reason)
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
