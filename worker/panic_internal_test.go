package worker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// panicOnce is a transport whose first request panics.
type panicOnce struct {
	next http.RoundTripper
	done atomic.Bool
}

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if !p.done.Swap(true) {
		panic("boom")
	}
	return p.next.RoundTrip(r)
}

// A panic while delivering is a counted failure of that delivery alone,
// committed like any other: one attempt spent, the panic named in it, its
// in-flight slot released with the outcome (not after its ttl), and the
// delivery parked for its backoff and then delivered.
func TestPanicIsACommittedFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := startRedis(t)
	ns := testkit.Namespace("panic")
	// A leaked slot would hold for RequestTimeout + MaxWait + 5s.
	w, err := New(Config{Redis: rdb, Namespace: ns, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RequestTimeout: 500 * time.Millisecond, ConnectTimeout: 500 * time.Millisecond, BackoffBase: 500 * time.Millisecond,
		BackoffMax: 500 * time.Millisecond, AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	w.h.client.Transport = &panicOnce{next: w.h.client.Transport}
	s := testkit.NewSink(t, nil)
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: s.URL, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	if _, err := p.Publish(ctx, tasks.Event{ID: "e1", Type: "t", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	var d tasks.DeliveryRecord
	testkit.Eventually(t, 10*time.Second, "the panicked run committed as a failure", func() bool {
		d, err = p.GetDelivery(ctx, "s", "e1")
		return err == nil && d.State == tasks.StateRetrying
	})
	if d.AttemptsSpent != 1 || len(d.Attempts) != 1 || !strings.Contains(d.Attempts[0].Error, "panicked") {
		t.Fatalf("the panicked delivery: %+v; want one attempt spent, the panic named", d)
	}
	if n, err := rdb.ZCard(ctx, tasks.Keys(ns).Gates("s").InFlight).Result(); err != nil || n != 0 {
		t.Fatalf("%d in-flight slots (%v) once the failure was committed; want its slot released", n, err)
	}
	testkit.Eventually(t, 10*time.Second, "delivered after its backoff", func() bool { return s.Count() == 1 })
}
