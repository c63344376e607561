package worker_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/loadtest"
	"github.com/hooklane/hooklane/deploy/testkit"
)

// A worker with nothing to deliver sends Redis at most 20 commands a
// second (issue 33, requirement 5's idle cost), counted with MONITOR on a
// redis-server of its own, and still delivers what is published to it.
// A slow machine only lowers the count: every loop sleeps between tries.
func TestIdleWorkerSendsAtMost20CommandsASecond(t *testing.T) {
	testkit.Heavy(t, "counts an idle worker's commands over 10s")
	t.Parallel()
	ctx := context.Background()
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	var summary strings.Builder
	// Out not there yet, as `hooklane bench -idle 20s -out .hooklane/bench-idle` gives it on a
	// fresh clone: made, as Run makes it (a worker process logs there).
	out := filepath.Join(t.TempDir(), "bench-idle")
	rep, err := loadtest.MeasureIdle(ctx, loadtest.Config{Redis: deploy.RedisConfig{URL: r.URL}, Out: out,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		loadtest.IdleSpec{Window: 10 * time.Second, Warmup: 2 * time.Second, Publishes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("Out after MeasureIdle: %v; want the folder made", err)
	}
	rep.Print(&summary, "")
	t.Log(summary.String())
	if got := rep.PerSecond(); got > 20 {
		t.Errorf("an idle worker sent %.1f commands/s; want at most 20", got)
	}
	if rep.Servers != 2 {
		t.Errorf("an idle worker runs %d asynq Servers; want 2, each lane's first", rep.Servers)
	}
	if len(rep.Latency) != 2 {
		t.Errorf("%d of 2 publishes delivered", len(rep.Latency))
	}
}
