package web_test

import (
	"testing"
)

// A tenant's caps and default retry policy shape the subscribers saved on
// its routes: defaults within its caps for what a subscriber leaves out,
// its retry policy for what it does not set, and a clear refusal that
// writes nothing past a cap (an endpoint's rate; the in-flight budget its
// endpoints share). The default tenant has none of it.
func TestTenantCapsShapeItsSubscribers(t *testing.T) {
	b := setup(t, nil)
	r := b.call(t, "PUT", "/v1/tenants/c", map[string]any{"max_rate": 5, "max_in_flight": 12, "max_attempts": 3, "retry_horizon": "1h"})
	if j := r.json(t); r.status != 201 || j["max_rate"] != float64(5) || j["max_in_flight"] != float64(12) || j["max_attempts"] != float64(3) || j["retry_horizon"] != "PT1H" {
		t.Fatalf("PUT /v1/tenants/c with caps: %d %s", r.status, r.body)
	}
	put := func(id string, body map[string]any) response {
		t.Helper()
		body["url"] = "http://127.0.0.1:9/" + id
		return b.callRaw(t, "PUT", "/v1/tenants/c/subscribers/"+id, body, bearer)
	}
	s1 := put("s1", map[string]any{}).json(t)
	if rl := s1["rate_limit"].(map[string]any); rl["rate"] != float64(5) || rl["period"] != "PT1S" || s1["max_in_flight"] != float64(10) ||
		s1["max_attempts"] != float64(3) || s1["retry_horizon"] != "PT1H" {
		t.Errorf("a subscriber saved with nothing: %v; want 5/s, 10 in flight, 3 attempts over 1h", s1)
	}
	if s2 := put("s2", map[string]any{"max_attempts": 7}).json(t); s2["max_in_flight"] != float64(2) || s2["max_attempts"] != float64(7) {
		t.Errorf("the second: %v; want the 2 in flight left, its own 7 attempts", s2)
	}
	for _, c := range []struct {
		id    string
		body  map[string]any
		field string
	}{
		{"s3", map[string]any{"max_in_flight": 1}, "max_in_flight"},
		{"s3", map[string]any{"rate_limit": map[string]any{"rate": 6, "burst": 6, "period": "1s"}}, "rate_limit"},
		{"s3", map[string]any{"rate_limit": map[string]any{"rate": 600, "burst": 6, "period": "1m"}}, "rate_limit"},
		{"s1", map[string]any{"max_in_flight": 11}, "max_in_flight"},
	} {
		r := put(c.id, c.body)
		if code, field := r.errorOf(t); r.status != 422 || code != "invalid" || field != c.field {
			t.Errorf("PUT %s %v: %d %s; want 422 on %s", c.id, c.body, r.status, r.body, c.field)
		}
	}
	if r := b.call(t, "GET", "/v1/tenants/c/subscribers/s3", nil); r.status != 404 {
		t.Errorf("s3, refused, exists: %d", r.status)
	}
	if s1 := put("s1", map[string]any{"max_in_flight": 10}).json(t); s1["max_in_flight"] != float64(10) {
		t.Errorf("s1 saved again within the budget: %v", s1)
	}
	// 600 a minute is 10 a second: refused above; 300 a minute passes
	if r := put("s4", map[string]any{"rate_limit": map[string]any{"rate": 300, "burst": 5, "period": "1m"}, "max_in_flight": 0}); r.status == 201 {
		t.Errorf("s4 with no in flight left: created")
	}
	if d := b.call(t, "PUT", "/v1/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/d"}).json(t); d["max_attempts"] != nil || d["rate_limit"].(map[string]any)["rate"] != float64(10) {
		t.Errorf("the default tenant's subscriber: %v; want the producer's defaults", d)
	}
	for _, body := range []map[string]any{{"max_rate": -1}, {"max_in_flight": -1}, {"max_attempts": 101}, {"retry_horizon": "500ms"}, {"retry_horizon": "soon"}} {
		if r := b.callRaw(t, "PUT", "/v1/tenants/c", body, bearer); r.status != 422 {
			t.Errorf("PUT /v1/tenants/c %v: %d %s; want 422", body, r.status, r.body)
		}
	}
}
