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

// groupProbe is a batch's grouped calls whose scripts answer from replies
// (by event id: what Admit answers that delivery) and record the size of
// each call.
type groupProbe struct {
	c       *batchCalls
	runs    []*run
	mu      sync.Mutex
	admits  []int
	commits []int
	replies map[string]limits.Admission
}

func newGroupProbe(n int) *groupProbe {
	p := &groupProbe{replies: map[string]limits.Admission{}}
	p.c = newBatchCalls(n,
		func(_ context.Context, in []limits.AdmitRequest) ([]limits.Admission, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.admits = append(p.admits, len(in))
			out := make([]limits.Admission, len(in))
			for i, r := range in {
				out[i] = p.replies[r.EventID]
			}
			return out, nil
		},
		func(_ context.Context, in []limits.Outcome) ([]limits.Committed, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.commits = append(p.commits, len(in))
			return make([]limits.Committed, len(in)), nil
		}, nil)
	// a wait for another delivery shows as the test's timeout
	p.c.admits.linger, p.c.admits.firstLinger, p.c.commits.linger = time.Minute, time.Minute, time.Minute
	for i := range n {
		p.runs = append(p.runs, p.c.newRun(&run{event: string(rune('a' + i))}))
	}
	return p
}

// admit and commit make run i's call in a goroutine of its own; the
// channel closes when it is answered.
func (p *groupProbe) admit(i int) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.runs[i].admit(context.Background(), nil, limits.AdmitRequest{EventID: p.runs[i].event})
	}()
	return done
}

func (p *groupProbe) commit(i int) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.runs[i].commit(context.Background(), nil, limits.Outcome{})
	}()
	return done
}

func (p *groupProbe) waiting(t *testing.T, g interface{ pending() int }, n int) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "calls waiting in the group", func() bool { return g.pending() == n })
}

func (g *group[In, Out]) pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

func answered(t *testing.T, what string, chs ...chan struct{}) {
	t.Helper()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not answered; a call waited for a delivery that was not coming", what)
		}
	}
}

func (p *groupProbe) sizes() (admits, commits []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.admits), slices.Clone(p.commits)
}

// A batch's first Admits go as one call even when one delivery asks well
// after the others (its goroutine started late in a busy process). After
// that round an Admit waits for the deliveries that wait for the rate
// slot they booked, and for no other: not one in its request, not one
// waiting for an in-flight slot.
func TestABatchsAdmitsWaitOnlyForDeliveriesComingBack(t *testing.T) {
	p := newGroupProbe(4)
	p.replies["a"] = limits.Admission{Admitted: true}
	p.replies["b"] = limits.Admission{SendIn: time.Millisecond}
	p.replies["c"] = limits.Admission{SendIn: time.Millisecond}
	p.replies["d"] = limits.Admission{Busy: true}
	// Until every delivery has asked once the group waits up to
	// firstLinger, not linger: twenty lingers late, the fourth still joins.
	p.c.admits.mu.Lock()
	p.c.admits.linger = time.Millisecond
	p.c.admits.mu.Unlock()
	first := []chan struct{}{p.admit(0), p.admit(1), p.admit(2)}
	p.waiting(t, &p.c.admits, 3)
	time.Sleep(20 * time.Millisecond) // the fourth is late
	answered(t, "the first round", append(first, p.admit(3))...)
	if admits, _ := p.sizes(); !slices.Equal(admits, []int{4}) {
		t.Fatalf("first Admits sent in calls of %v; want one of 4", admits)
	}
	p.c.admits.mu.Lock()
	p.c.admits.linger = time.Minute // a wait for another delivery shows as the test's timeout
	p.c.admits.mu.Unlock()
	// b comes back from its rate slot: c, also waiting for one, is waited
	// for; a (in its request) and d (waiting for an in-flight slot) are not.
	p.mu.Lock()
	p.replies["b"], p.replies["c"] = limits.Admission{Admitted: true}, limits.Admission{Admitted: true}
	p.mu.Unlock()
	b := p.admit(1)
	p.waiting(t, &p.c.admits, 1)
	answered(t, "b and c after their rate slots", b, p.admit(2))
	if admits, _ := p.sizes(); !slices.Equal(admits, []int{4, 2}) {
		t.Fatalf("Admits sent in calls of %v; want 4, then b and c together", admits)
	}
	// d's slot frees: its Admit goes at once, alone.
	answered(t, "d after its wait for a slot", p.admit(3))
	if admits, _ := p.sizes(); !slices.Equal(admits, []int{4, 2, 1}) {
		t.Fatalf("Admits sent in calls of %v; want 4, 2, then d alone", admits)
	}
}

// A batch's commit waits for the batch's deliveries that hold an in-flight
// slot, not for those waiting for one: with one slot, the others wait for
// the very slot the commit frees, and a commit that waited for them sent
// each request of a one-at-a-time endpoint a linger late (a serial
// endpoint's batches ran at a quarter of its single tasks' pace).
func TestABatchsCommitWaitsOnlyForHeldSlots(t *testing.T) {
	p := newGroupProbe(3)
	p.replies["a"] = limits.Admission{Admitted: true}
	p.replies["b"] = limits.Admission{Busy: true}
	p.replies["c"] = limits.Admission{Busy: true}
	answered(t, "the first round", p.admit(0), p.admit(1), p.admit(2))
	answered(t, "the only admitted delivery's commit", p.commit(0))
	// Both others admitted: the first to answer waits for the second, and
	// the two go as one call.
	p.replies["b"], p.replies["c"] = limits.Admission{Admitted: true}, limits.Admission{Admitted: true}
	answered(t, "b and c admitted", p.admit(1), p.admit(2))
	b := p.commit(1)
	p.waiting(t, &p.c.commits, 1)
	answered(t, "b and c committed", b, p.commit(2))
	if _, commits := p.sizes(); !slices.Equal(commits, []int{1, 2}) {
		t.Fatalf("commits sent in calls of %v; want 1, then 2 together", commits)
	}
}
