package web_test

import (
	"fmt"
	"testing"
)

// Issue 34, requirement 1, through the API: tenants a and b registered,
// each with subscriber s1 and event evt_1 of its own; each tenant's routes
// show its own, by its own ids; the routes without a tenant (the default
// tenant's) show none of theirs; an unknown tenant's routes answer 404
// unknown_tenant; a deleted tenant's too, at once, and the list of
// tenants no longer names it.
func TestTenantRoutesShowTheirOwn(t *testing.T) {
	b := setup(t, nil)
	for _, n := range []string{"a", "b"} {
		if r := b.call(t, "PUT", "/v1/tenants/"+n, nil); r.status != 201 {
			t.Fatalf("PUT /v1/tenants/%s: %d %s", n, r.status, r.body)
		}
		base := "/v1/tenants/" + n
		if r := b.call(t, "PUT", base+"/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/" + n}); r.status != 201 {
			t.Fatalf("PUT %s/subscribers/s1: %d %s", base, r.status, r.body)
		}
		r := b.call(t, "POST", base+"/events", map[string]any{"id": "evt_1", "type": "t", "data": map[string]string{"tenant": n}})
		if r.status != 202 {
			t.Fatalf("POST %s/events: %d %s", base, r.status, r.body)
		}
		if tg := r.json(t)["targets"].([]any)[0].(map[string]any); tg["subscriber_id"] != "s1" || tg["task_id"] != "s1:evt_1" {
			t.Fatalf("%s's publish target: %v; want its s1 by its own ids", n, tg)
		}
	}
	if r := b.call(t, "PUT", "/v1/tenants/a", nil); r.status != 200 {
		t.Fatalf("PUT /v1/tenants/a again: %d %s; want 200", r.status, r.body)
	}
	for _, n := range []string{"a", "b"} {
		base := "/v1/tenants/" + n
		if got := b.call(t, "GET", base+"/subscribers/s1", nil).json(t)["url"]; got != "http://127.0.0.1:9/"+n {
			t.Errorf("%s's s1 has url %v", n, got)
		}
		ev := b.call(t, "GET", base+"/events/evt_1", nil).json(t)
		if data := ev["event"].(map[string]any)["data"].(map[string]any); data["tenant"] != n {
			t.Errorf("%s's evt_1 has data %v", n, data)
		}
		if d := b.call(t, "GET", base+"/subscribers/s1/deliveries/evt_1", nil); d.status != 200 || d.json(t)["subscriber_id"] != "s1" {
			t.Errorf("%s's delivery: %d %s", n, d.status, d.body)
		}
		subs := b.call(t, "GET", base+"/subscribers", nil).json(t)["subscribers"].([]any)
		if len(subs) != 1 || subs[0].(map[string]any)["id"] != "s1" {
			t.Errorf("%s's subscribers: %v", n, subs)
		}
	}
	if subs := b.call(t, "GET", "/v1/subscribers", nil).json(t)["subscribers"].([]any); len(subs) != 0 {
		t.Errorf("the default tenant's subscribers: %v; want none of the tenants'", subs)
	}
	for _, path := range []string{"/v1/subscribers/s1", "/v1/events/evt_1"} {
		if r := b.call(t, "GET", path, nil); r.status != 404 {
			t.Errorf("GET %s (the default tenant's): %d %s; want 404", path, r.status, r.body)
		}
	}
	for _, path := range []string{"/v1/tenants/zz/subscribers", "/v1/tenants/zz/subscribers/s1", "/v1/tenants/Not.A.Name/events/evt_1", "/v1/tenants/zz"} {
		r := b.callRaw(t, "GET", path, nil, bearer) // (a name the document refuses too)
		if code, _ := r.errorOf(t); r.status != 404 || code != "unknown_tenant" {
			t.Errorf("GET %s: %d %s; want 404 unknown_tenant", path, r.status, r.body)
		}
	}
	if r := b.call(t, "DELETE", "/v1/tenants/a", nil); r.status != 204 {
		t.Fatalf("DELETE /v1/tenants/a: %d %s", r.status, r.body)
	}
	r := b.call(t, "GET", "/v1/tenants/a/subscribers/s1", nil)
	if code, _ := r.errorOf(t); r.status != 404 || code != "unknown_tenant" {
		t.Errorf("a's s1 after a's delete: %d %s; want 404 unknown_tenant", r.status, r.body)
	}
	list := b.call(t, "GET", "/v1/tenants", nil).json(t)["tenants"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["name"] != "b" {
		t.Errorf("GET /v1/tenants after a's delete: %v; want b alone", list)
	}
	if got := b.call(t, "GET", "/v1/tenants/b/subscribers/s1", nil).json(t)["url"]; got != "http://127.0.0.1:9/b" {
		t.Errorf("b's s1 after a's delete: url %v", got)
	}
	if r := b.call(t, "DELETE", "/v1/tenants/default", nil); r.status != 422 {
		t.Errorf("DELETE /v1/tenants/default: %d %s; want 422", r.status, r.body)
	}
	if r := b.callRaw(t, "PUT", "/v1/tenants/c", map[string]any{"max_things": 3}, bearer); r.status != 400 && r.status != 422 {
		t.Errorf("PUT /v1/tenants/c with a setting it does not have: %d %s; want it refused", r.status, r.body)
	}
	if r := b.call(t, "GET", "/v1/tenants/c", nil); r.status != 404 {
		t.Errorf("a refused PUT wrote tenant c: %d %s", r.status, r.body)
	}
}

// Issue 34, requirement 4 (in part): a tenant's settings. max_subscribers
// refuses a creation past it (409 tenant_limit, nothing written), not a
// replace; ingest_rate answers a publish past it 429 with Retry-After,
// whatever token publishes, beside the token's own limit.
func TestTenantSettings(t *testing.T) {
	b := setup(t, nil)
	r := b.call(t, "PUT", "/v1/tenants/a", map[string]any{"max_subscribers": 1, "ingest_rate": 1})
	if r.status != 201 || r.json(t)["max_subscribers"] != float64(1) {
		t.Fatalf("PUT /v1/tenants/a with settings: %d %s", r.status, r.body)
	}
	if r := b.call(t, "PUT", "/v1/tenants/a/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/a"}); r.status != 201 {
		t.Fatal(r.status)
	}
	r = b.call(t, "PUT", "/v1/tenants/a/subscribers/s2", map[string]any{"url": "http://127.0.0.1:9/a"})
	if code, _ := r.errorOf(t); r.status != 409 || code != "tenant_limit" {
		t.Errorf("a second subscriber past max_subscribers 1: %d %s; want 409 tenant_limit", r.status, r.body)
	}
	if r := b.call(t, "GET", "/v1/tenants/a/subscribers/s2", nil); r.status != 404 {
		t.Errorf("the refused subscriber was written: %d", r.status)
	}
	if r := b.call(t, "PUT", "/v1/tenants/a/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/a2"}); r.status != 200 {
		t.Errorf("replacing s1 at max_subscribers: %d %s; want 200", r.status, r.body)
	}
	limited := 0
	for i := range 5 {
		r := b.call(t, "POST", "/v1/tenants/a/events", map[string]any{"id": fmt.Sprintf("e%d", i), "type": "t", "data": map[string]any{}})
		if r.status == 429 {
			limited++
			if code, _ := r.errorOf(t); code != "rate_limited" || r.header.Get("Retry-After") == "" {
				t.Errorf("a publish past ingest_rate: %d %s %v; want 429 rate_limited with Retry-After", r.status, r.body, r.header)
			}
		}
	}
	if limited < 2 {
		t.Errorf("%d of 5 publishes at once refused at ingest_rate 1 (burst 1); want at least 2", limited)
	}
	if r := b.call(t, "PUT", "/v1/tenants/a", nil); r.status != 200 || r.json(t)["max_subscribers"] != nil {
		t.Errorf("a PUT without settings: %d %s; want them all gone", r.status, r.body)
	}
	if r := b.call(t, "PUT", "/v1/tenants/a/subscribers/s2", map[string]any{"url": "http://127.0.0.1:9/a"}); r.status != 201 {
		t.Errorf("s2 once max_subscribers is gone: %d %s", r.status, r.body)
	}
}
