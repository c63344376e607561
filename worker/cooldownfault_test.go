package worker_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// A 429 whose cooldown cannot be written (every try of the cooldown
// script fails at the proxy, the real worker process's retries
// included) still holds its own delivery and the subscriber's others
// until the Retry-After deadline: the run's commit parks it until the
// deadline and writes the cooldown the run could not. The endpoint is
// strict, as in crashAround429: before its deadline it answers 429
// again, so an early request is seen and counted. The deadline is an
// HTTP-date, so that the seconds the worker spends retrying the write do
// not move it.
func TestRetryAfterHeldWhenItsCooldownWriteFails(t *testing.T) {
	t.Parallel()
	ns := testkit.Namespace("cooldown-lost-")
	var (
		mu       sync.Mutex
		deadline time.Time
		first    string
	)
	rc := testkit.NewReceiver(t, func(w http.ResponseWriter, _ *http.Request, id string) bool {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now().Round(0) // the wall clock, as hooklane's deadline (see crashAround429)
		if deadline.IsZero() {
			deadline, first = now.Add(14*time.Second).Truncate(time.Second).Add(time.Second), id
		}
		if now.Before(deadline) {
			w.Header().Set("Retry-After", deadline.UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
			return false
		}
		return true
	})
	b := newCrashBundle(t, ns, tasks.Subscriber{ID: "s", URL: rc.URL, Limit: fast, MaxInFlight: 1})
	proxy := newFaultProxy(t, redisSrv.Addr)
	// The cooldown script: one key, the cooldown key.
	proxy.failUntilHealed(append([]byte("$1\r\n1\r\n"), respKeys(tasks.Keys(ns).Gates("s").Cooldown)...))
	w := startProc(t, proxy.URL(), ns)
	ids := b.publishN(t, "e", 3)
	testkit.Eventually(t, 20*time.Second, "the worker to give up writing the cooldown", func() bool {
		return strings.Contains(w.log.String(), "could not record cooldown")
	})
	proxy.heal()
	mu.Lock()
	dl, firstID := deadline, first
	mu.Unlock()
	if gaveUp := time.Now(); !gaveUp.Before(dl) {
		t.Fatalf("the worker gave up writing the cooldown %v after the deadline: the test did not test", gaveUp.Sub(dl))
	}
	c := settle(t, b.insp, b.rdb, ns, "s", ids, rc, 40*time.Second)
	var early []string
	for i, h := range rc.Got() {
		if i > 0 && h.At.Round(0).Before(dl) {
			early = append(early, fmt.Sprintf("%s %.1fs early", h.ID, dl.Sub(h.At).Seconds()))
		}
	}
	t.Logf("%s; cooldown writes failed %d; first (throttled) event %s; early requests %v", c, proxy.failures(), firstID, early)
	if len(c.lost) > 0 || c.delivered != len(ids) || c.duplicates != 0 {
		t.Errorf("lost %v, delivered %d of %d, %d duplicates", c.lost, c.delivered, len(ids), c.duplicates)
	}
	if len(early) > 0 {
		t.Errorf("requests before the Retry-After deadline, its cooldown write failed: %v", early)
	}
	if proxy.failures() < 2 {
		t.Errorf("the cooldown write failed %d times; want every try of it", proxy.failures())
	}
}
