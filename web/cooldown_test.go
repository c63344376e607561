package web_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
)

// An operator ends a cooldown the endpoint asked for (a Retry-After of an
// hour): the API call (here through the CLI) answers the status without
// the cooldown, and the delivery parked on it goes at once.
func TestEndCooldownLetsTheParkedDeliveryGo(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL})
	if r := b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`); r.status != http.StatusAccepted {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	var st web.Status
	testkit.Eventually(t, 10*time.Second, "the hour's cooldown", func() bool {
		return b.cli(t, &st, "subscribers", "status", "s") == nil && st.CoolingUntil != nil &&
			time.Until(*st.CoolingUntil) > 50*time.Minute
	})
	if s.Count() != 1 {
		t.Fatalf("%d requests before the cooldown ended; want the one answered 429", s.Count())
	}
	if err := b.cli(t, &st, "subscribers", "end-cooldown", "s"); err != nil || st.CoolingUntil != nil {
		t.Fatalf("end-cooldown: %+v, %v; want the status without a cooldown", st.CoolingUntil, err)
	}
	testkit.Eventually(t, 10*time.Second, "e1 delivered after the cooldown ended", func() bool { return s.Count() == 2 })
	if got := s.Got()[1].Header.Get("webhook-id"); got != "e1" {
		t.Fatalf("second request for %q; want e1", got)
	}
}
