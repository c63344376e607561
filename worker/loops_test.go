package worker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Each lane runs DequeueLoops asynq Servers on its queues, its Concurrency
// split among them.
func TestEachLaneRunsItsDequeueLoops(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{Concurrency: 10, DequeueLoops: 3})
	keys := tasks.Keys(b.ns)
	lanes := func() map[string][]int { // lane queue → its Servers' concurrency
		got := map[string][]int{}
		servers, err := b.insp.Servers()
		if err != nil {
			return nil
		}
		for _, s := range servers {
			for q := range s.Queues {
				if keys.OwnsQueue(q) {
					got[q] = append(got[q], s.Concurrency)
				}
			}
		}
		return got
	}
	fresh, backlog := keys.ShardQueue("", tasks.LaneFresh, 0), keys.ShardQueue("", tasks.LaneBacklog, 0)
	var got map[string][]int
	testkit.Eventually(t, 10*time.Second, "every Server registered", func() bool {
		got = lanes()
		return len(got[fresh]) == 3 && len(got[backlog]) == 3
	})
	for _, q := range []string{fresh, backlog} {
		c := got[q]
		slices.Sort(c)
		if !slices.Equal(c, []int{3, 3, 4}) {
			t.Errorf("queue %s: Servers of concurrency %v, want [3 3 4]", q, c)
		}
	}
	if len(got) != 2 {
		t.Errorf("the worker's Servers serve queues %v, want only its two lanes'", got)
	}
}
