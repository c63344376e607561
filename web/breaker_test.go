package web_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
)

// An endpoint that refuses every connection opens its breaker: the status
// answer and /metrics say so, and its events are held, not dead-lettered.
func TestOpenBreakerShowsInStatusAndMetrics(t *testing.T) {
	b := setup(t, fastRetries)
	down, err := deploy.NewRefusingPort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { down.Close() })
	b.call(t, "PUT", "/v1/subscribers/down", map[string]any{"url": "http://" + down.Addr + "/hook", "metrics": true})
	for i := range 10 {
		if r := b.call(t, "POST", "/v1/events", fmt.Sprintf(`{"id":"e%d","type":"t","data":1}`, i)); r.status != 202 {
			t.Fatalf("publish: %d %s", r.status, r.body)
		}
	}
	var st web.Status
	testkit.Eventually(t, 20*time.Second, "the breaker open", func() bool {
		r := b.call(t, "GET", "/v1/subscribers/down/status", nil)
		st = web.Status{}
		return r.status == 200 && json.Unmarshal(r.body, &st) == nil && st.Breaker.State != "closed"
	})
	if st.Breaker.FailingSince == nil || st.Breaker.OpenedAt == nil || st.Breaker.NextProbe == nil || st.Breaker.LastError == "" {
		t.Fatalf("open breaker %+v; want failing since, opened, next probe and the last error", st.Breaker)
	}
	fams := scrape(t, b)
	if v, _, ok := value(fams, "hooklane_breaker_state", map[string]string{"subscriber": "down"}); !ok || v < 1 {
		t.Errorf("hooklane_breaker_state{subscriber=down} = %v (present %v); want open (1 or 2)", v, ok)
	}
	if v, _, _ := value(fams, "hooklane_breakers_open", nil); v != 1 {
		t.Errorf("hooklane_breakers_open = %v; want 1", v)
	}
	if st.Counts.Dead != 0 {
		t.Errorf("%d dead letters; want the events held (8 attempts each, the breaker open after 5 failures)", st.Counts.Dead)
	}
}
