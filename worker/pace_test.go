package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// A subscriber at one request an hour, five events queued, one delivered:
// raising its limit sends the other four now, not one an hour.
func TestRaisedLimitAppliesToQueuedEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	slow := limits.Limit{Rate: 1, Burst: 1, Period: time.Hour}
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: slow})
	for i := range 5 {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 10*time.Second, "the first delivery", func() bool { return s.Count() == 1 })
	if testkit.PollEvery(time.Second, 100*time.Millisecond, func() bool { return s.Count() > 1 }) {
		t.Fatalf("%d deliveries at one an hour before the limit changed", s.Count())
	}
	raised := time.Now()
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.PerSecond(100)})
	testkit.Eventually(t, 5*time.Second, "the other four after the limit was raised", func() bool { return s.Count() == 5 })
	t.Logf("the four queued events arrived %v after the limit was raised", s.Got()[4].At.Sub(raised).Round(time.Millisecond))

	// A changed period applies to new events too: 100/s becomes 3 per minute.
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.Limit{Rate: 3, Burst: 1, Period: time.Minute}})
	for i := range 3 {
		b.publish(t, fmt.Sprintf("p%d", i), "t")
	}
	testkit.Eventually(t, 5*time.Second, "one event of the new period", func() bool { return s.Count() == 6 })
	if testkit.PollEvery(2*time.Second, 100*time.Millisecond, func() bool { return s.Count() > 6 }) {
		t.Fatalf("%d deliveries; at 3 a minute, burst 1, only one may go at once", s.Count())
	}
}

// pacingLead is how far ahead of Redis' clock subscriber s's pacing cursor
// has booked.
func pacingLead(t *testing.T, b *bundle) time.Duration {
	t.Helper()
	ctx := context.Background()
	v, err := b.rdb.Get(ctx, tasks.Keys(b.ns).Gates("s").Pacing).Result()
	if err != nil {
		t.Fatal(err)
	}
	tat, _ := strconv.ParseFloat(v, 64)
	now, err := b.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(int64(tat)).Sub(now)
}

// A task that finds every in-flight slot taken, or its subscriber paused,
// waits without taking a pacing slot: only rate and cooldown waits book
// them, so tasks behind a busy destination are not pushed back.
func TestBusyAndPausedDeferralsBookNoPacingSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{MaxWait: worker.NoWait, PauseRecheck: 200 * time.Millisecond})
	release := make(chan struct{})
	s := testkit.NewSink(t, func(http.ResponseWriter, int) { <-release })
	// 20 go at once by the burst, then one a second: publishing books 20s.
	l := limits.Limit{Rate: 1, Burst: 20, Period: time.Second}
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: l, MaxInFlight: 1})
	for i := range 20 {
		b.publish(t, fmt.Sprintf("e%02d", i), "t")
	}
	booked := pacingLead(t, b)
	if booked > 21*time.Second {
		t.Fatalf("20 publishes booked %v ahead, want about 20s", booked)
	}
	testkit.Eventually(t, 10*time.Second, "busy deferrals", func() bool { return b.counter(t, "s", "deferred:"+worker.GateInFlight) >= 19 })
	if lead := pacingLead(t, b); lead > booked {
		t.Fatalf("the cursor moved from %v to %v ahead: busy deferrals took pacing slots", booked, lead)
	}
	if err := b.p.SetPaused(context.Background(), "s", true); err != nil {
		t.Fatal(err)
	}
	close(release)
	testkit.Eventually(t, 10*time.Second, "paused deferrals", func() bool { return b.counter(t, "s", "deferred:"+worker.GatePaused) >= 10 })
	if lead := pacingLead(t, b); lead > booked {
		t.Fatalf("the cursor moved from %v to %v ahead: paused deferrals took pacing slots", booked, lead)
	}
}
