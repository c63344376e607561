package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"
)

// A lane's handler slots are split over its Servers without losing or
// adding one, and never into a Server without a slot.
func TestSplitConcurrency(t *testing.T) {
	for _, c := range []struct {
		n, loops int
		want     []int
	}{
		{200, 8, []int{25, 25, 25, 25, 25, 25, 25, 25}},
		{10, 4, []int{3, 3, 2, 2}},
		{3, 8, []int{1, 1, 1}},
		{1, 8, []int{1}},
		{5, 1, []int{5}},
	} {
		if got := splitConcurrency(c.n, c.loops); !slices.Equal(got, c.want) {
			t.Errorf("splitConcurrency(%d, %d) = %v, want %v", c.n, c.loops, got, c.want)
		}
	}
}

// Runners pass each task and its context through and return the handler's
// error; one after another, tasks reuse one runner, and at most as many
// run as tasks ran at once.
func TestRunnersReuseTheirGoroutines(t *testing.T) {
	var seen atomic.Int64
	boom := errors.New("boom")
	type key struct{}
	release := make(chan struct{})
	var started sync.WaitGroup
	h := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		seen.Add(1)
		if task.Type() == "block" {
			started.Done()
			<-release
		}
		if ctx.Value(key{}) != task.Type() {
			t.Errorf("task %s ran with the context of %v", task.Type(), ctx.Value(key{}))
		}
		if task.Type() == "fail" {
			return boom
		}
		return nil
	})
	p := newRunners(h)
	for _, typ := range []string{"ok", "fail", "ok", "fail"} {
		err := p.ProcessTask(context.WithValue(context.Background(), key{}, typ), asynq.NewTask(typ, nil))
		if want := map[string]error{"ok": nil, "fail": boom}[typ]; !errors.Is(err, want) || (want == nil && err != nil) {
			t.Fatalf("task %s returned %v, want %v", typ, err, want)
		}
	}
	if n := p.count.Load(); n != 1 {
		t.Fatalf("4 tasks one after another started %d runners, want 1", n)
	}
	started.Add(3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			_ = p.ProcessTask(context.WithValue(context.Background(), key{}, "block"), asynq.NewTask("block", nil))
		})
	}
	started.Wait() // three run at once: the idle one and two new
	close(release)
	wg.Wait()
	if n := p.count.Load(); n != 3 {
		t.Fatalf("3 tasks at once, after 4 one by one, started %d runners in all, want 3", n)
	}
	p.close() // goleak (TestMain) checks they are gone
	if seen.Load() != 7 {
		t.Fatalf("handler ran %d times, want 7", seen.Load())
	}
}
