package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// openPortal makes a portal link for tenant (with the operator's token),
// opens it as a browser would, and returns the session's cookie.
func (b *bundle) openPortal(t *testing.T, tenant string) (link, cookie string) {
	t.Helper()
	r := b.call(t, "POST", "/v1/tenants/"+tenant+"/portal", nil)
	if r.status != 201 {
		t.Fatalf("POST /v1/tenants/%s/portal: %d %s", tenant, r.status, r.body)
	}
	link = r.json(t)["url"].(string)
	return link, b.redeem(t, link)
}

// redeem GETs a portal link and returns the session cookie it set.
func (b *bundle) redeem(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	p := b.console(t, "GET", u.Path, nil, nil, false)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/subscribers" {
		t.Fatalf("GET %s: %d %s; want 303 to the console", u.Path, p.status, p.body)
	}
	resp := http.Response{Header: p.header}
	for _, c := range resp.Cookies() {
		if c.Name == "hooklane_portal" {
			if !c.HttpOnly || c.Path != "/console/" || c.SameSite != http.SameSiteLaxMode {
				t.Errorf("the portal cookie: %+v; want HttpOnly, Path /console/, SameSite Lax", c)
			}
			return c.Value
		}
	}
	t.Fatalf("GET %s set no portal cookie: %v", u.Path, p.header)
	return ""
}

// inPortal is a console request made with a portal session's cookie (and
// no token); a form is posted from the console's own origin.
func (b *bundle) inPortal(t *testing.T, method, path, cookie string, form url.Values) page {
	t.Helper()
	hdr := map[string]string{"Cookie": "hooklane_portal=" + cookie}
	if form != nil {
		hdr["Origin"], hdr["Sec-Fetch-Site"] = b.srv.URL, "same-origin"
	}
	return b.console(t, method, path, form, hdr, false)
}

// portalPost submits the form of action on the portal's page from.
func (b *bundle) portalPost(t *testing.T, cookie, from, action string, extra url.Values) page {
	t.Helper()
	form := url.Values{"csrf": {formToken(t, b.inPortal(t, "GET", from, cookie, nil).body, action)}}
	for k, v := range extra {
		form[k] = v
	}
	return b.inPortal(t, "POST", action, cookie, form)
}

// A portal link opens the console for its tenant alone, once: a's session
// shows and changes a's endpoints and none of b's (which have the same
// ids), reaches nothing of the operator's, and its forms' tokens are its
// own. A used link, an expired one, and a session whose link expired or
// whose tenant was deleted are refused.
func TestPortal(t *testing.T) {
	b := setup(t, nil)
	for _, tn := range []string{"a", "b"} {
		b.call(t, "PUT", "/v1/tenants/"+tn, nil)
		if r := b.call(t, "PUT", "/v1/tenants/"+tn+"/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/" + tn + "-hook"}); r.status != 201 {
			t.Fatal(r.status, string(r.body))
		}
	}
	r := b.call(t, "POST", "/v1/tenants/a/portal", map[string]any{"expires_in": "30m"})
	exp, _ := time.Parse(time.RFC3339Nano, r.json(t)["expires_at"].(string))
	if r.status != 201 || time.Until(exp) > 30*time.Minute || time.Until(exp) < 29*time.Minute {
		t.Fatalf("a portal link for 30m: %d %s", r.status, r.body)
	}
	for _, body := range []any{map[string]any{"expires_in": "2h"}, map[string]any{"expires_in": "10s"}, map[string]any{"expires": "1h"}} {
		if r := b.callRaw(t, "POST", "/v1/tenants/a/portal", body, bearer); r.status/100 != 4 {
			t.Errorf("POST …/portal %v: %d %s; want refused", body, r.status, r.body)
		}
	}
	link, ck := b.openPortal(t, "a")
	if !strings.HasPrefix(link, b.srv.URL+"/portal/hlp_") {
		t.Errorf("link %s: want %s/portal/hlp_…", link, b.srv.URL)
	}
	u, _ := url.Parse(link)
	if p := b.console(t, "GET", u.Path, nil, nil, false); p.status != http.StatusGone || !strings.Contains(p.body, "used already") {
		t.Errorf("the link used again: %d %s; want 410", p.status, p.body)
	}

	p := b.inPortal(t, "GET", "/console/subscribers", ck, nil)
	if p.status != 200 || !strings.Contains(p.body, "a-hook") || strings.Contains(p.body, "b-hook") ||
		strings.Contains(p.body, "/monitoring/") || !strings.Contains(p.body, "portal · a") {
		t.Fatalf("a's portal: %d; want a's s1, not b's, no asynqmon link:\n%s", p.status, p.body)
	}
	// its actions change a's s1 alone
	if p := b.portalPost(t, ck, "/console/subscribers/s1", "/console/subscribers/s1/pause", nil); p.status != http.StatusSeeOther {
		t.Fatalf("pause in a's portal: %d %s", p.status, p.body)
	}
	if a, bb := b.call(t, "GET", "/v1/tenants/a/subscribers/s1", nil).json(t), b.call(t, "GET", "/v1/tenants/b/subscribers/s1", nil).json(t); a["paused"] != true || bb["paused"] != false {
		t.Errorf("after a pause in a's portal: a's s1 paused %v, b's %v; want true, false", a["paused"], bb["paused"])
	}
	if p := b.portalPost(t, ck, "/console/create/subscriber", "/console/create/subscriber", url.Values{"id": {"s2"}, "url": {"http://127.0.0.1:9/a-two"},
		"rate": {"5"}, "burst": {"5"}, "period": {"1s"}, "max_in_flight": {"3"}}); p.status != http.StatusOK || !strings.Contains(p.body, "whsec_") {
		t.Fatalf("create in a's portal: %d %s", p.status, p.body)
	}
	if r := b.call(t, "GET", "/v1/tenants/a/subscribers/s2", nil); r.status != 200 {
		t.Errorf("s2, created in a's portal, is not a's: %d", r.status)
	}
	if r := b.call(t, "GET", "/v1/tenants/b/subscribers/s2", nil); r.status != 404 {
		t.Errorf("s2, created in a's portal, is b's too: %d", r.status)
	}
	// forms are bound to their session: the operator's token does not
	// pass in a portal, nor a portal's in the operator's console
	b.call(t, "PUT", "/v1/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/default-hook"})
	opForm := formToken(t, b.consoleGet(t, "/console/subscribers/s1").body, "/console/subscribers/s1/pause")
	if p := b.inPortal(t, "POST", "/console/subscribers/s1/pause", ck, url.Values{"csrf": {opForm}}); p.status != http.StatusForbidden {
		t.Errorf("the operator's form token in a's portal: %d; want 403", p.status)
	}
	pForm := formToken(t, b.inPortal(t, "GET", "/console/subscribers/s1", ck, nil).body, "/console/subscribers/s1/resume")
	if p := b.console(t, "POST", "/console/subscribers/s1/resume", url.Values{"csrf": {pForm}},
		map[string]string{"Origin": b.srv.URL, "Sec-Fetch-Site": "same-origin"}, true); p.status != http.StatusForbidden {
		t.Errorf("a portal's form token in the operator's console: %d; want 403", p.status)
	}
	// nothing of the operator's
	for _, path := range []string{"/monitoring/", "/metrics", "/v1/subscribers", "/v1/tenants/a/subscribers"} {
		if p := b.inPortal(t, "GET", path, ck, nil); p.status != 401 {
			t.Errorf("GET %s with a's portal cookie: %d; want 401", path, p.status)
		}
	}

	// expired: the link, and the session once its link's time is up
	keys := tasks.Keys(b.ns)
	ctx := context.Background()
	r = b.call(t, "POST", "/v1/tenants/a/portal", nil)
	spent := r.json(t)["url"].(string)
	for _, k := range b.rdb.Keys(ctx, keys.PortalLink("*")).Val() {
		b.rdb.PExpire(ctx, k, time.Millisecond)
	}
	su, _ := url.Parse(spent)
	testkit.Eventually(t, 5*time.Second, "the expired link refused", func() bool {
		return b.console(t, "GET", su.Path, nil, nil, false).status == http.StatusGone
	})
	for _, k := range b.rdb.Keys(ctx, keys.PortalSession("*")).Val() {
		b.rdb.PExpire(ctx, k, time.Millisecond)
	}
	testkit.Eventually(t, 5*time.Second, "the expired session refused", func() bool {
		p := b.inPortal(t, "GET", "/console/subscribers", ck, nil)
		return p.status == http.StatusUnauthorized && strings.Contains(p.body, "session has ended") &&
			strings.Contains(p.header.Get("Set-Cookie"), "hooklane_portal=;")
	})
	// a deleted tenant's session ends with it
	_, ckB := b.openPortal(t, "b")
	if p := b.inPortal(t, "GET", "/console/subscribers", ckB, nil); p.status != 200 {
		t.Fatalf("b's portal: %d", p.status)
	}
	b.call(t, "DELETE", "/v1/tenants/b", nil)
	testkit.Eventually(t, 5*time.Second, "a deleted tenant's session refused", func() bool {
		return b.inPortal(t, "GET", "/console/subscribers", ckB, nil).status == http.StatusUnauthorized
	})
	if r := b.call(t, "POST", "/v1/tenants/b/portal", nil); r.status != 404 {
		t.Errorf("a portal link for a deleted tenant: %d; want 404", r.status)
	}
}

// A tenant token with manage makes its own tenant's portal links (the
// route without a tenant meaning its tenant); one without manage cannot;
// signing out ends the session.
func TestPortalByTenantTokenAndSignOut(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/tenants/a", nil)
	b.call(t, "PUT", "/v1/tenants/a/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/a-hook"})
	b.call(t, "PUT", "/v1/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/default-hook"})
	manage := b.tenantToken(t, "a", time.Time{}, "manage")
	read := b.tenantToken(t, "a", time.Time{}, "read")
	if r := b.callAuth(t, "POST", "/v1/portal", nil, read); r.status != 403 {
		t.Errorf("a read token makes a portal link: %d %s; want 403", r.status, r.body)
	}
	r := b.callAuth(t, "POST", "/v1/portal", nil, manage)
	if r.status != 201 {
		t.Fatalf("a manage token on POST /v1/portal: %d %s", r.status, r.body)
	}
	ck := b.redeem(t, r.json(t)["url"].(string))
	if p := b.inPortal(t, "GET", "/console/subscribers", ck, nil); !strings.Contains(p.body, "a-hook") || strings.Contains(p.body, "default-hook") {
		t.Errorf("the portal of a's token's link: want a's s1, not the default tenant's:\n%s", p.body)
	}
	if p := b.portalPost(t, ck, "/console/subscribers", "/console/signout", nil); p.status != 200 || !strings.Contains(p.body, "signed out") {
		t.Fatalf("sign out: %d %s", p.status, p.body)
	}
	if p := b.inPortal(t, "GET", "/console/subscribers", ck, nil); p.status != http.StatusUnauthorized {
		t.Errorf("the session after signing out: %d; want 401", p.status)
	}
	// the operator's short route: the default tenant's portal
	ck = b.redeem(t, b.call(t, "POST", "/v1/portal", nil).json(t)["url"].(string))
	if p := b.inPortal(t, "GET", "/console/subscribers", ck, nil); !strings.Contains(p.body, "default-hook") || strings.Contains(p.body, "a-hook") {
		t.Errorf("the operator's POST /v1/portal: want the default tenant's portal:\n%s", p.body)
	}
}

// The portal may be framed by the pages HOOKLANE_PORTAL_FRAME_ANCESTORS
// names (the operator's app); the operator's console never is.
func TestPortalFrameAncestors(t *testing.T) {
	b := setupWith(t, nil, func(c *web.Config) { c.PortalFrameAncestors = "https://app.example.com" })
	b.call(t, "PUT", "/v1/tenants/a", nil)
	link := b.call(t, "POST", "/v1/tenants/a/portal", nil).json(t)["url"].(string)
	u, _ := url.Parse(link)
	opened := b.console(t, "GET", u.Path, nil, nil, false)
	ck := b.redeem(t, b.call(t, "POST", "/v1/tenants/a/portal", nil).json(t)["url"].(string))
	for name, p := range map[string]page{
		"the link":                opened,
		"a portal page":           b.inPortal(t, "GET", "/console/subscribers", ck, nil),
		"the operator's console":  b.consoleGet(t, "/console/subscribers"),
		"a page without a cookie": b.console(t, "GET", "/console/subscribers", nil, nil, false),
	} {
		fa, xfo := cspDirectives(p.header.Get("Content-Security-Policy"))["frame-ancestors"], p.header.Get("X-Frame-Options")
		portal := name == "the link" || name == "a portal page"
		if portal && (fa != "https://app.example.com" || xfo != "") || !portal && (fa != "'none'" || xfo != "DENY") {
			t.Errorf("%s: frame-ancestors %q, X-Frame-Options %q", name, fa, xfo)
		}
	}
	for _, bad := range []string{"https://a.example; script-src *", "'unsafe-inline'"} {
		if _, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, PortalFrameAncestors: bad}); err == nil {
			t.Errorf("HOOKLANE_PORTAL_FRAME_ANCESTORS=%q accepted", bad)
		}
	}
	for _, bad := range []string{"hooks.example.com", "https://hooks.example.com/path", "ftp://x"} {
		if _, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, PublicURL: bad}); err == nil {
			t.Errorf("HOOKLANE_PUBLIC_URL=%q accepted", bad)
		}
	}
}

// HOOKLANE_PUBLIC_URL is the origin of the links made.
func TestPortalPublicURL(t *testing.T) {
	b := setupWith(t, nil, func(c *web.Config) { c.PublicURL = "https://hooks.example.com/" })
	b.call(t, "PUT", "/v1/tenants/a", nil)
	if link := b.call(t, "POST", "/v1/tenants/a/portal", nil).json(t)["url"].(string); !strings.HasPrefix(link, "https://hooks.example.com/portal/hlp_") {
		t.Errorf("link %s: want it on HOOKLANE_PUBLIC_URL", link)
	}
}

// A portal's test events are publishes of its tenant's: its ingest limit
// refuses them past it (429 with Retry-After), as on the API.
func TestPortalTestEventsCountAgainstTheTenant(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/tenants/a", map[string]any{"ingest_rate": 1})
	b.call(t, "PUT", "/v1/tenants/a/subscribers/s1", map[string]any{"url": "http://127.0.0.1:9/a-hook"})
	_, ck := b.openPortal(t, "a")
	if p := b.portalPost(t, ck, "/console/subscribers/s1", "/console/subscribers/s1/test", nil); p.status != http.StatusSeeOther {
		t.Fatalf("a test event in a's portal: %d %s", p.status, p.body)
	}
	p := b.portalPost(t, ck, "/console/subscribers/s1", "/console/subscribers/s1/test", nil)
	if p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") == "" || !strings.Contains(p.body, "tenant a") {
		t.Fatalf("a second test event at once, past a's ingest rate of 1: %d %v %s; want 429 with Retry-After", p.status, p.header, p.body)
	}
}
