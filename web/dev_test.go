package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web/cli"
	"github.com/hooklane/hooklane/web/dev"
)

// What `make run` promises a newcomer: within a minute the fast subscriber
// has its events (and its reminders due later scheduled, not retrying),
// the limited one is throttled with Retry-After and retrying, and the down
// one's events are dead letters.
func TestDevShowsDeliveriesRetriesAndDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := map[string]string{"REDIS_URL": redisSrv.URL, "PORT": "0", "HOOKLANE_NAMESPACE": testkit.Namespace("devdemo")} // a fresh one per run: the demo counts from zero
	var out testkit.Buffer
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- dev.Run(ctx, dev.Options{Getenv: func(k string) string { return env[k] }, Out: &out,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Events: 20, DataDir: t.TempDir()})
	}()
	banner := regexp.MustCompile(`asynqmon UI\s+(http://127\.0\.0\.1:\d+)/monitoring/\s+\(user: anything, password: (\S+)\)`)
	var m []string
	testkit.Eventually(t, 30*time.Second, "the banner", func() bool {
		m = banner.FindStringSubmatch(out.String())
		return m != nil
	})
	if console := regexp.MustCompile(`console\s+(http://127\.0\.0\.1:\d+)/console/\s+\(user: anything, password: (\S+)\)`).FindStringSubmatch(out.String()); console == nil || console[1] != m[1] || console[2] != m[2] {
		t.Fatalf("the banner names no console at %s:\n%s", m[1], out.String())
	}
	c := cli.NewClient(m[1], m[2])
	c.HTTP.Transport = checked{t: t, next: http.DefaultTransport}

	// demo-fast's 3 reminders, due in 90 s, are scheduled, not retrying:
	// no request was made for them; the progress line says so too.
	fastLine := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d  demo-fast: 20 delivered, 0 dead; waiting: 3 scheduled, 0 retrying, 0 cooling, 0 held  demo-limited: `)
	testkit.Eventually(t, 60*time.Second, "fast deliveries, 429s, dead letters and an open breaker", func() bool {
		fast, err1 := c.Status(ctx, "demo-fast")
		limited, err2 := c.Status(ctx, "demo-limited")
		dead, err3 := c.DeadLetters(ctx, "demo-down", 0, "")
		down, err4 := c.Status(ctx, "demo-down")
		return err1 == nil && err2 == nil && err3 == nil && err4 == nil && fast.Counts.Delivered == 20 &&
			fast.Counts.Scheduled == 3 && fast.Counts.Retrying == 0 &&
			limited.Counts.Delivered >= 2 && limited.Counts.Deferred >= 1 && len(dead.DeadLetters) >= 1 &&
			down.Breaker.State != "closed" && fastLine.MatchString(out.String())
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Dev: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Dev did not stop")
	}
}
