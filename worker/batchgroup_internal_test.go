package worker

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
)

// A batch's first Admits go as one call even when one delivery asks well
// after the others (its goroutine started late in a busy process): until
// every delivery has asked once, the group waits up to firstLinger, not
// linger. After that round, a call waits no more than linger for a
// delivery that is elsewhere.
func TestABatchsFirstAdmitsGoAsOne(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	send := func(_ context.Context, in []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(in))
		mu.Unlock()
		return in, nil
	}
	c := newBatchCalls(3, nil, nil, nil)
	g := &group[int, int]{send: send, linger: time.Millisecond, coming: func(n int64) int64 { return c.live.Load() - n }, kick: make(chan struct{}, 1), first: 3,
		firstLinger: time.Minute}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { _, _ = g.call(ctx, i) })
	}
	testkit.Eventually(t, 5*time.Second, "two deliveries asking", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.waiting) == 2
	})
	time.Sleep(20 * time.Millisecond) // twenty times linger: the third is late
	wg.Go(func() { _, _ = g.call(ctx, 2) })
	wg.Wait()
	if !slices.Equal(sizes, []int{3}) {
		t.Fatalf("first Admits sent in calls of %v; want one of 3", sizes)
	}
	// A second round: one delivery asks again while the other two are
	// elsewhere (in their requests): it goes after linger, alone.
	if _, err := g.call(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sizes, []int{3, 1}) {
		t.Fatalf("calls of %v; want 3 then 1", sizes)
	}
}

// A batch's commit waits for the batch's deliveries that hold an in-flight
// slot, not for those waiting for one: with one slot, the others wait for
// the very slot the commit frees, and a commit that waited for them sent
// each request of a one-at-a-time endpoint a linger late (a serial
// endpoint's batches ran at a quarter of its single tasks' pace).
func TestABatchsCommitWaitsOnlyForHeldSlots(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	send := func(_ context.Context, in []limits.Outcome) ([]limits.Committed, error) {
		mu.Lock()
		sizes = append(sizes, len(in))
		mu.Unlock()
		return make([]limits.Committed, len(in)), nil
	}
	c := newBatchCalls(3, nil, send, nil)
	c.commits.linger = time.Minute // a wait for another shows as the test's timeout
	ctx := context.Background()
	runs := []*run{{batch: c}, {batch: c}, {batch: c}}
	committed := func(r *run) chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = r.commit(ctx, nil, limits.Outcome{})
		}()
		return done
	}
	// One delivery holds the slot; the other two wait for it (live, no slot).
	c.admitted(runs[0])
	select {
	case <-committed(runs[0]):
	case <-time.After(5 * time.Second):
		t.Fatal("the only admitted delivery's commit waited for deliveries that hold no slot")
	}
	// Both others admitted: the first to answer waits for the second, and
	// the two go as one call.
	c.admitted(runs[1])
	c.admitted(runs[2])
	first := committed(runs[1])
	testkit.Eventually(t, 5*time.Second, "the first commit waiting", func() bool {
		c.commits.mu.Lock()
		defer c.commits.mu.Unlock()
		return len(c.commits.waiting) == 1
	})
	second := committed(runs[2])
	for _, done := range []chan struct{}{first, second} {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a commit did not go once both held deliveries asked")
		}
	}
	if !slices.Equal(sizes, []int{1, 2}) {
		t.Fatalf("commits sent in calls of %v; want 1, then 2 together", sizes)
	}
}
