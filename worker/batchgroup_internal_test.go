package worker

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
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
	g := &group[int, int]{send: send, linger: time.Millisecond, live: &c.live, kick: make(chan struct{}, 1), first: 3,
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
