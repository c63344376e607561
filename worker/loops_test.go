package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Each lane runs DequeueLoops asynq Servers on its queues, its Concurrency
// split among them: an idle lane only its first, the others from the
// moment two of its tasks run at once until it has been idle again.
func TestEachLaneRunsItsDequeueLoops(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{Concurrency: 10, DequeueLoops: 3})
	keys := tasks.Keys(b.ns)
	lanes := func() map[string][]int { // lane queue → its Servers' concurrency, sorted
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
		for _, c := range got {
			slices.Sort(c)
		}
		return got
	}
	fresh, backlog := keys.ShardQueue("", tasks.LaneFresh, 0), keys.ShardQueue("", tasks.LaneBacklog, 0)
	var got map[string][]int
	want := func(what string, f, bl []int) {
		t.Helper()
		if !testkit.Poll(10*time.Second, func() bool {
			got = lanes()
			return len(got) == 2 && slices.Equal(got[fresh], f) && slices.Equal(got[backlog], bl)
		}) {
			t.Fatalf("%s: the lanes' Servers have concurrency %v; want fresh %v, backlog %v, no other queue", what, got, f, bl)
		}
	}
	want("idle", []int{4}, []int{4})

	release := make(chan struct{})
	sink := testkit.NewSink(t, func(http.ResponseWriter, int) { <-release })
	b.put(t, tasks.Subscriber{ID: "s", URL: sink.URL, Limit: limits.Limit{Rate: 100, Burst: 100, Period: time.Second}, MaxInFlight: 10})
	for i := range 3 {
		if _, err := b.p.Publish(context.Background(), tasks.Event{ID: fmt.Sprintf("e%d", i), Type: "t", Data: []byte(`1`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "two requests held at once", func() bool { return len(sink.Got()) >= 2 })
	want("two of the fresh lane's tasks running", []int{3, 3, 4}, []int{4})
	close(release)
	testkit.Eventually(t, 10*time.Second, "the events delivered", func() bool { return b.settled(t) })
	b.w.StopIdleLoops(time.Hour)
	want("idle for less than the linger", []int{3, 3, 4}, []int{4})
	b.w.StopIdleLoops(0)
	want("idle again", []int{4}, []int{4})
}
