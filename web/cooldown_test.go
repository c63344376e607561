package web_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// An operator ends a cooldown the endpoint asked for (a Retry-After of an
// hour): the API call (here through the CLI) answers the status without
// the cooldown and with the time the operator ended it, and the
// deliveries parked on it go at once, each attempt saying it went early
// because of the operator: e1 (its 429 earned the cooldown) and e2
// (published during it, never tried), but not e3, published after the
// end. While they wait, status counts both cooling.
func TestEndCooldownLetsTheParkedDeliveryGo(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL})
	publish := func(id string) {
		t.Helper()
		if r := b.call(t, "POST", "/v1/events", `{"id":"`+id+`","type":"t","data":1}`); r.status != http.StatusAccepted {
			t.Fatalf("publish %s: %d %s", id, r.status, r.body)
		}
	}
	publish("e1")
	var st web.Status
	testkit.Eventually(t, 10*time.Second, "the hour's cooldown", func() bool {
		return b.cli(t, &st, "subscribers", "status", "s") == nil && st.CoolingUntil != nil &&
			time.Until(*st.CoolingUntil) > 50*time.Minute && st.Counts.Cooling == 1
	})
	publish("e2")
	if err := b.cli(t, &st, "subscribers", "status", "s"); err != nil || st.Counts.Cooling != 2 || st.Counts.Scheduled+st.Counts.Retrying != 0 {
		t.Fatalf("status while cooling: %+v, %v; want e1 (its 429) and e2 (published during it) cooling", st.Counts, err)
	}
	if st.CooldownEndedByOperatorAt != nil {
		t.Fatalf("cooldown_ended_by_operator_at %v before any operator ended one; want null", st.CooldownEndedByOperatorAt)
	}
	if s.Count() != 1 {
		t.Fatalf("%d requests before the cooldown ended; want the one answered 429", s.Count())
	}
	before := time.Now()
	if err := b.cli(t, &st, "subscribers", "end-cooldown", "s"); err != nil || st.CoolingUntil != nil {
		t.Fatalf("end-cooldown: %+v, %v; want the status without a cooldown", st.CoolingUntil, err)
	}
	ended := st.CooldownEndedByOperatorAt
	if ended == nil || ended.Before(before.Add(-time.Second)) || ended.After(time.Now().Add(time.Second)) {
		t.Fatalf("cooldown_ended_by_operator_at %v; want the time of the call (%v)", ended, before)
	}
	testkit.Eventually(t, 10*time.Second, "e1 and e2 delivered after the cooldown ended", func() bool { return s.Count() == 3 })
	got := map[string]bool{}
	for _, a := range s.Got()[1:] {
		got[a.Header.Get("webhook-id")] = true
	}
	if !got["e1"] || !got["e2"] {
		t.Fatalf("requests after the end for %v; want e1 and e2", got)
	}
	publish("e3")
	testkit.Eventually(t, 10*time.Second, "e3 delivered", func() bool { return s.Count() == 4 })

	note := "sent early: cooldown ended by an operator at " + ended.Format(time.RFC3339Nano)
	for _, c := range []struct {
		event string
		notes []string // each attempt's, oldest first
	}{
		{"e1", []string{"", note}}, // its 429, then the request the operator let go
		{"e2", []string{note}},
		{"e3", []string{""}},
	} {
		var rec tasks.DeliveryRecord
		testkit.Eventually(t, 5*time.Second, c.event+" delivered on record", func() bool {
			return b.cli(t, &rec, "deliveries", "get", "s", c.event) == nil && rec.State == tasks.StateDelivered
		})
		if len(rec.Attempts) != len(c.notes) {
			t.Fatalf("%s: %d attempts %+v; want %d", c.event, len(rec.Attempts), rec.Attempts, len(c.notes))
		}
		for i, a := range rec.Attempts {
			if a.Note != c.notes[i] {
				t.Errorf("%s attempt %d: note %q; want %q", c.event, i+1, a.Note, c.notes[i])
			}
		}
	}
	if err := b.cli(t, &st, "subscribers", "status", "s"); err != nil || st.CooldownEndedByOperatorAt == nil || !st.CooldownEndedByOperatorAt.Equal(*ended) {
		t.Fatalf("status after: cooldown_ended_by_operator_at %v, %v; want %v kept", st.CooldownEndedByOperatorAt, err, ended)
	}
}
