//go:build repro

package loadtest

// A reproduction of a hooklane defect, not part of `make test` (it fails
// until the defect is fixed; then drop the build tag):
//
//	go test -tags repro -count=1 -v -run TestBookedSlotSentLate ./deploy/loadtest/
//
// worker/handler.go admit: a request whose rate-limit slot Admit booked
// ahead (Admission.Reserved) sleeps until the slot, then takes an
// in-flight slot with Gates.Take. When every in-flight slot is busy, it
// waits in the destination's busy lane (up to MaxWait, polling every
// 20ms) and, once Take succeeds, sends on the slot it booked earlier. The
// GCRA spaced the slots, not the sends: the late request leaves together
// with the ones whose slots come after it, so the destination sees more
// than burst + rate·t.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

func TestBookedSlotSentLate(t *testing.T) {
	const events, slowAt = 15, 3 // the third request is answered after 450ms
	const slack = 20 * time.Millisecond
	lim := limits.Limit{Rate: 10, Burst: 1, Period: time.Second}
	ctx := context.Background()
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	rdb, err := deploy.RedisConfig{URL: r.URL}.NewClient(deploy.ClientTuning{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })

	var mu sync.Mutex
	var at []time.Time
	var inFlight, most atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		_, _ = io.Copy(io.Discard, req.Body)
		mu.Lock()
		at = append(at, now)
		slow := len(at) == slowAt
		mu.Unlock()
		if slow {
			time.Sleep(450 * time.Millisecond)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: "repro", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: "http://" + ln.Addr().String() + "/",
		EventTypes: []string{"t"}, Limit: lim, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range events {
		if _, err := p.Publish(ctx, tasks.Event{ID: fmt.Sprintf("e%02d", i), Type: "t", Data: []byte(`{}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	w, err := worker.New(worker.Config{Redis: rdb, Namespace: "repro", Logger: log,
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(at)
		mu.Unlock()
		if n >= events || time.Now().After(deadline) {
			break
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != events {
		t.Fatalf("%d requests for %d events", len(at), events)
	}
	for i := range at {
		t.Logf("request %2d at %+7.1fms", i+1, float64(at[i].Sub(at[0]))/float64(time.Millisecond))
	}
	if m := most.Load(); m > 1 {
		t.Errorf("%d requests in flight at once, the cap is 1", m)
	}
	if wnd := worstWindow(at, 10, 1, slack); wnd.Exceeded {
		t.Errorf("%d requests within %.1fms, %s allows %.2f (burst + rate·(t + %s)): the requests that waited for the in-flight slot left on the slots they booked before it, together with the next ones",
			wnd.Count, wnd.Span*1000, lim, wnd.Allowed, slack)
	}
}
