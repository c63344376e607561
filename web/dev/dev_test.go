package dev_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/web/cli"
	"github.com/hooklane/hooklane/web/dev"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

var banner = regexp.MustCompile(`API\s+curl -H 'Authorization: Bearer (\S+)' (http://127\.0\.0\.1:\d+)/v1/subscribers`)

// running is one `hooklane dev` in the test's process.
type running struct {
	out    *testkit.Buffer
	cancel context.CancelFunc
	done   chan error
	token  string
	client *cli.Client
}

// start runs dev.Run with o (its environment env, PORT 0, no demo) and
// waits for its banner, or returns the error it stopped with.
func start(t *testing.T, o dev.Options, env map[string]string) (*running, error) {
	t.Helper()
	env["PORT"] = "0"
	o.Getenv = func(k string) string { return env[k] }
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Events = -1
	r := &running{out: &testkit.Buffer{}, done: make(chan error, 1)}
	o.Out = r.out
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- dev.Run(ctx, o) }()
	var m []string
	ok := testkit.Poll(60*time.Second, func() bool {
		select {
		case err := <-r.done:
			r.done <- err
			return true
		default:
		}
		m = banner.FindStringSubmatch(r.out.String())
		return m != nil
	})
	if m == nil {
		cancel()
		if !ok {
			t.Fatalf("no banner within 60s:\n%s", r.out.String())
		}
		return nil, <-r.done
	}
	r.token = m[1]
	r.client = cli.NewClient(m[2], m[1])
	t.Cleanup(func() { r.stop(t) })
	return r, nil
}

// stop ends the run and fails the test if it ended with an error.
func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("dev.Run: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("dev.Run did not stop within 40s")
	}
}

// A second `make run` keeps the first's token, so that the console tabs
// and exports the first opened keep working; -fresh makes a new one.
func TestDevKeepsItsTokenAcrossRuns(t *testing.T) {
	testkit.Heavy(t, "runs hooklane dev three times")
	redisSrv, err := deploy.StartRedis(context.Background(), deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer redisSrv.Stop()
	dir := t.TempDir()
	env := map[string]string{"REDIS_URL": redisSrv.URL}
	first, err := start(t, dev.Options{DataDir: dir}, env)
	if err != nil {
		t.Fatal(err)
	}
	first.stop(t)
	second, err := start(t, dev.Options{DataDir: dir}, env)
	if err != nil {
		t.Fatal(err)
	}
	second.stop(t)
	if second.token != first.token {
		t.Fatalf("the second run's token is %s; want the first's, %s", second.token, first.token)
	}
}

// Without REDIS_URL dev mode starts its own redis-server, whose data the
// next run finds (here a subscriber), with the same token; -fresh starts
// from zero: no subscriber, a new token. Each run stops its server.
func TestDevKeepsItsOwnRedisAcrossRuns(t *testing.T) {
	testkit.Heavy(t, "runs hooklane dev and its redis-server three times")
	ctx := context.Background()
	port, err := deploy.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	o := dev.Options{DataDir: t.TempDir(), RedisPort: port}
	first, err := start(t, o, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first.out.String(), "redis://127.0.0.1:"+strconv.Itoa(port)+"/0") {
		t.Fatalf("the banner names no Redis on port %d:\n%s", port, first.out.String())
	}
	sub := web.SubscriberRequest{URL: "http://127.0.0.1:9/hooks", EventTypes: []string{"demo.*"}}
	if _, err := first.client.PutSubscriber(ctx, "kept", sub); err != nil {
		t.Fatal(err)
	}
	first.stop(t)
	if conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		conn.Close()
		t.Fatal("the first run's redis-server still listens after the run ended")
	}

	second, err := start(t, o, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if second.token != first.token {
		t.Fatalf("the second run's token is %s; want the first's, %s", second.token, first.token)
	}
	if _, err := second.client.GetSubscriber(ctx, "kept"); err != nil {
		t.Fatalf("the second run lost the first's subscriber: %v", err)
	}
	second.stop(t)

	o.Fresh = true
	fresh, err := start(t, o, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.token == first.token {
		t.Fatalf("-fresh kept the token %s", fresh.token)
	}
	if _, err := fresh.client.GetSubscriber(ctx, "kept"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("-fresh: GetSubscriber(kept) = %v; want a 404", err)
	}
}

// A Redis on the port that hooklane did not start is refused, with how to
// use it; nothing is written to it, and no token is stored.
func TestDevRefusesAForeignRedis(t *testing.T) {
	testkit.Heavy(t, "starts redis-server")
	ctx := context.Background()
	foreign, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Stop()
	port, _ := strconv.Atoi(foreign.Addr[strings.LastIndexByte(foreign.Addr, ':')+1:])
	dir := t.TempDir()
	_, err = start(t, dev.Options{DataDir: dir, RedisPort: port}, map[string]string{})
	want := "a Redis already listens on " + foreign.Addr + " and hooklane did not start it; set REDIS_URL=redis://" + foreign.Addr + " to use it, or stop it"
	var fe *deploy.ForeignRedisError
	if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &fe) {
		t.Fatalf("dev.Run beside a foreign Redis: %v; want an error saying %q", err, want)
	}
	c := redis.NewClient(&redis.Options{Addr: foreign.Addr})
	defer c.Close()
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("the foreign Redis holds %d keys (%v); want none", n, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("dev.Run wrote %v into its data dir though it refused to start", entries)
	}
	// -fresh does not delete a foreign server's files either, nor does a
	// configured Redis let -fresh through.
	if _, err := start(t, dev.Options{DataDir: dir, Fresh: true}, map[string]string{"REDIS_URL": foreign.URL}); err == nil || !strings.Contains(err.Error(), "-fresh") {
		t.Fatalf("dev.Run -fresh with REDIS_URL: %v; want a refusal naming -fresh", err)
	}
}

// A server of dev mode's own left running by a run that was killed (it has
// its own process group) is recognised by its data dir, stopped and
// started again on the same data, not refused.
func TestDevTakesOverItsOwnLeftoverRedis(t *testing.T) {
	testkit.Heavy(t, "starts redis-server and hooklane dev")
	ctx := context.Background()
	dir := t.TempDir()
	left, err := deploy.StartRedis(ctx, deploy.RedisOpts{Dir: filepath.Join(dir, "redis"), AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer left.Stop()
	c := redis.NewClient(&redis.Options{Addr: left.Addr})
	defer c.Close()
	if err := c.Set(ctx, "left-by-the-last-run", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	pid := regexp.MustCompile(`process_id:\d+\r\n`).FindString(before)
	port, _ := strconv.Atoi(left.Addr[strings.LastIndexByte(left.Addr, ':')+1:])
	r, err := start(t, dev.Options{DataDir: dir, RedisPort: port}, map[string]string{})
	if err != nil {
		t.Fatalf("dev.Run beside its own leftover Redis: %v", err)
	}
	defer r.stop(t)
	if v, err := c.Get(ctx, "left-by-the-last-run").Result(); err != nil || v != "1" {
		t.Fatalf("the leftover's data after the takeover: %q, %v; want it kept", v, err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil || pid == "" || strings.Contains(info, pid) {
		t.Fatalf("the leftover redis-server (%q) still serves (%v); want it replaced by the run's own", pid, err)
	}
}
