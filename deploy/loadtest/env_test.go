package loadtest

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/worker"
)

// A subprocess worker or floor gets the run's whole Redis configuration as
// environment variables, and none of the harness' own: a stray REDIS_URL
// beside the cluster's addresses would stop it (two modes), a stray
// password would go to the wrong Redis.
func TestSubprocessesGetTheWholeRedisConfig(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://stray.example:6379/0")
	t.Setenv("HOOKLANE_REDIS_SENTINEL_PASSWORD", "stray")
	dir := t.TempDir()
	// Stands in for the hooklane binary: prints its arguments and environment.
	exe := filepath.Join(dir, "print-env")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho \"args: $*\"\nenv\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	want := deploy.RedisConfig{ClusterAddrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, Username: "app", Password: "pw", TLS: true, TLSSkipVerify: true}
	e := &env{cfg: Config{Out: dir, Exec: exe, Redis: want, Worker: worker.Config{Shards: 4}}.WithDefaults()}
	run := func(name string, start func() (*proc, error)) (args string, got map[string]string) {
		t.Helper()
		p, err := start()
		if err != nil {
			t.Fatal(err)
		}
		if err := <-p.done; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.log.Close()
		b, err := os.ReadFile(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if a, ok := strings.CutPrefix(line, "args: "); ok {
				args = a
			} else if k, v, ok := strings.Cut(line, "="); ok {
				got[k] = v
			}
		}
		return args, got
	}
	for _, tt := range []struct {
		name, args string
		start      func() (*proc, error)
	}{
		{"worker-ns1-2", "worker", func() (*proc, error) { return e.startWorker(context.Background(), "ns1", 2) }},
		{"floor-q1-x3", "bench -serve-floor -floor-queue q1 -concurrency 200 -floor-servers 3", func() (*proc, error) { return e.startFloor(context.Background(), "q1", 3) }},
	} {
		args, got := run(tt.name, tt.start)
		if !strings.HasPrefix(args, tt.args) {
			t.Errorf("%s ran with %q, want %q…", tt.name, args, tt.args)
		}
		rc, err := deploy.RedisFromEnv(func(k string) string { return got[k] })
		if err != nil {
			t.Fatalf("%s: its Redis variables do not read back: %v", tt.name, err)
		}
		if !reflect.DeepEqual(want, rc) {
			t.Errorf("%s got Redis %s, want %s", tt.name, rc, want)
		}
		if tt.name == "worker-ns1-2" && (got["HOOKLANE_NAMESPACE"] != "ns1" || got["HOOKLANE_QUEUE_SHARDS"] != "4") {
			t.Errorf("worker got HOOKLANE_NAMESPACE %q, HOOKLANE_QUEUE_SHARDS %q; want ns1, 4", got["HOOKLANE_NAMESPACE"], got["HOOKLANE_QUEUE_SHARDS"])
		}
		if _, ok := got["PATH"]; !ok {
			t.Errorf("%s lost the rest of the environment", tt.name)
		}
	}
}
