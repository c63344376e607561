package web_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
)

// tenantToken creates a token of tenant with scopes (expiring at expires
// when not zero) and returns its secret, as an auth func.
func (b *bundle) tenantToken(t *testing.T, tenant string, expires time.Time, scopes ...string) func(*http.Request) {
	t.Helper()
	body := map[string]any{"scopes": scopes}
	if !expires.IsZero() {
		body["expires_at"] = expires.UTC().Format(time.RFC3339Nano)
	}
	r := b.call(t, "POST", "/v1/tenants/"+tenant+"/tokens", body)
	secret, _ := r.json(t)["token"].(string)
	if r.status != 201 || !strings.HasPrefix(secret, "hlt_") {
		t.Fatalf("POST /v1/tenants/%s/tokens: %d %s", tenant, r.status, r.body)
	}
	return func(req *http.Request) { req.Header.Set("Authorization", "Bearer "+secret) }
}

// Issue 34, requirement 2: a tenant's token reaches its own tenant's
// routes, the routes without a tenant meaning its tenant, as its scopes
// allow; the tenants' own routes, its tokens' and the operator's pages
// refuse it; the operator lists tokens without secrets, with when they
// were last used; a revoked or expired token is refused.
func TestTenantTokens(t *testing.T) {
	b := setup(t, nil)
	if r := b.call(t, "PUT", "/v1/tenants/a", nil); r.status != 201 {
		t.Fatal(r.status)
	}
	b.call(t, "PUT", "/v1/tenants/a/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/a"})
	read := b.tenantToken(t, "a", time.Time{}, "read")
	pub := b.tenantToken(t, "a", time.Time{}, "publish")
	manage := b.tenantToken(t, "a", time.Now().Add(time.Hour), "manage", "read")

	if subs := b.callAuth(t, "GET", "/v1/subscribers", nil, read).json(t)["subscribers"].([]any); len(subs) != 1 ||
		subs[0].(map[string]any)["id"] != "s1" {
		t.Errorf("a's read token on GET /v1/subscribers: %v; want a's s1", subs)
	}
	if r := b.callAuth(t, "GET", "/v1/tenants/a/subscribers/s1", nil, read); r.status != 200 {
		t.Errorf("a's read token on its tenant's route: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		method, path string
		body         any
		auth         func(*http.Request)
		status       int
	}{
		{"PUT", "/v1/subscribers/s2", map[string]any{"url": "http://127.0.0.1:9/a2"}, read, 403},
		{"POST", "/v1/events", map[string]any{"id": "e1", "type": "t", "data": map[string]any{}}, read, 403},
		{"GET", "/v1/subscribers", nil, pub, 403},
		{"POST", "/v1/events", map[string]any{"id": "e1", "type": "t", "data": map[string]any{}}, pub, 202},
		{"POST", "/v1/tenants/a/events/batch", map[string]any{"events": []any{map[string]any{"id": "e2", "type": "t", "data": map[string]any{}}}}, pub, 202},
		{"POST", "/v1/events", map[string]any{"id": "e3", "type": "t", "data": map[string]any{}}, manage, 403},
		{"PUT", "/v1/subscribers/s2", map[string]any{"url": "http://127.0.0.1:9/a2"}, manage, 201},
	} {
		if r := b.callAuth(t, c.method, c.path, c.body, c.auth); r.status != c.status {
			t.Errorf("%s %s: %d %s; want %d", c.method, c.path, r.status, r.body, c.status)
		}
	}
	if r := b.call(t, "GET", "/v1/tenants/a/subscribers/s2", nil); r.status != 200 {
		t.Errorf("a's s2, created with its manage token on /v1/subscribers/s2, is not a's: %d %s", r.status, r.body)
	}
	if r := b.call(t, "GET", "/v1/tenants/a/events/e1", nil); r.status != 200 {
		t.Errorf("a's e1, published with its publish token on /v1/events, is not a's: %d %s", r.status, r.body)
	}
	// the tenants' own routes answer as an unknown tenant's; the operator's pages refuse it
	for _, path := range []string{"/v1/tenants", "/v1/tenants/a", "/v1/tenants/a/tokens"} {
		r := b.callRaw(t, "GET", path, nil, manage)
		if code, _ := r.errorOf(t); r.status != 404 || code != "unknown_tenant" {
			t.Errorf("a's token on GET %s: %d %s; want 404 unknown_tenant", path, r.status, r.body)
		}
	}
	for _, path := range []string{"/monitoring/", "/console/", "/metrics"} {
		if r := b.callRaw(t, "GET", path, nil, manage); r.status != 401 {
			t.Errorf("a's token on GET %s: %d; want 401", path, r.status)
		}
	}
	list := b.call(t, "GET", "/v1/tenants/a/tokens", nil)
	toks := list.json(t)["tokens"].([]any)
	if len(toks) != 3 || strings.Contains(string(list.body), "hlt_") {
		t.Fatalf("the operator's list of a's tokens: %s; want 3, no secret", list.body)
	}
	for _, tk := range toks {
		if tk.(map[string]any)["last_used_at"] == nil {
			t.Errorf("token %v: never used, it says", tk)
		}
	}
	id := toks[0].(map[string]any)["id"].(string) // read's, the first created
	if r := b.call(t, "DELETE", "/v1/tenants/a/tokens/"+id, nil); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 3*time.Second, "the revoked token refused", func() bool {
		return b.callRaw(t, "GET", "/v1/subscribers", nil, read).status == 401
	})
	short := b.tenantToken(t, "a", time.Now().Add(1500*time.Millisecond), "read")
	if r := b.callAuth(t, "GET", "/v1/subscribers", nil, short); r.status != 200 {
		t.Fatalf("a token before its expiry: %d", r.status)
	}
	testkit.Eventually(t, 5*time.Second, "the expired token refused", func() bool {
		return b.callRaw(t, "GET", "/v1/subscribers", nil, short).status == 401
	})
	if r := b.callRaw(t, "POST", "/v1/tenants/a/tokens", map[string]any{"scopes": []string{"admin"}}, bearer); r.status != 422 {
		t.Errorf("a token of scope admin: %d %s; want 422", r.status, r.body)
	}
	if r := b.callRaw(t, "POST", "/v1/tenants/zz/tokens", map[string]any{"scopes": []string{"read"}}, bearer); r.status != 404 {
		t.Errorf("a token of an unknown tenant: %d %s; want 404", r.status, r.body)
	}
}
