package web_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// page is a console answer.
type page struct {
	status int
	header http.Header
	body   string
}

// console makes a request to the console as a browser would: the token as
// the basic-auth password (auth false: none), redirects not followed, and
// for a POST the form with the headers hdr.
func (b *bundle) console(t *testing.T, method, path string, form url.Values, hdr map[string]string, auth bool) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if auth {
		req.SetBasicAuth("operator", token)
	}
	c := *b.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, header: resp.Header, body: string(out)}
}

func (b *bundle) consoleGet(t *testing.T, path string) page {
	t.Helper()
	return b.console(t, "GET", path, nil, nil, true)
}

// consolePost submits the form of action found on the page at from, as the
// console's own page would (same origin, its token), with extra fields.
func (b *bundle) consolePost(t *testing.T, from, action string, extra url.Values) page {
	t.Helper()
	form := url.Values{"csrf": {formToken(t, b.consoleGet(t, from).body, action)}}
	for k, v := range extra {
		form[k] = v
	}
	return b.console(t, "POST", action, form, map[string]string{"Origin": b.srv.URL, "Sec-Fetch-Site": "same-origin"}, true)
}

// later is a not-before a day from now (RFC 3339): an event that waits
// while the test reads its pages.
func later() string { return time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339) }

// formToken is the csrf field of the first form posting to action in html.
func formToken(t *testing.T, html, action string) string {
	t.Helper()
	m := regexp.MustCompile(`action="` + regexp.QuoteMeta(action) + `"[^>]*>\s*<input type="hidden" name="csrf" value="([^"]+)"`).FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no form posting to %s on the page:\n%s", action, html)
	}
	return m[1]
}

// cspDirectives parses a Content-Security-Policy header.
func cspDirectives(h string) map[string]string {
	out := map[string]string{}
	for _, d := range strings.Split(h, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		if name != "" {
			out[name] = value
		}
	}
	return out
}

// Every console answer (pages, errors, static files, the 401) sends a CSP
// that runs scripts only from the console's own files, no plugin and no
// framing; pages are not cached; without the token the browser is asked for
// it and shown nothing.
func TestConsoleHeadersAndAuth(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "http://127.0.0.1:9/x"})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1,"not_before":"`+later()+`"}`)

	paths := map[string]int{
		"/console/subscribers": 200, "/console/subscribers/s": 200, "/console/subscribers/s/deliveries/e1": 200,
		"/console/events/e1": 200, "/console/search": 200, "/console/search?q=nothing": 404, "/console/subscribers/nobody": 404,
		"/console/no-such-page": 404, "/console/static/console.css": 200, "/console/static/console.js": 200,
		"/console/subscribers?limit=0": 422,
	}
	for path, want := range paths {
		for _, auth := range []bool{true, false} {
			p := b.console(t, "GET", path, nil, nil, auth)
			csp := cspDirectives(p.header.Get("Content-Security-Policy"))
			if csp["script-src"] != "'self'" || csp["object-src"] != "'none'" || csp["frame-ancestors"] != "'none'" ||
				strings.Contains(p.header.Get("Content-Security-Policy"), "unsafe") {
				t.Errorf("GET %s (auth %v): CSP %q", path, auth, p.header.Get("Content-Security-Policy"))
			}
			if !auth {
				if p.status != http.StatusUnauthorized || !strings.HasPrefix(p.header.Get("WWW-Authenticate"), "Basic ") ||
					strings.Contains(p.body, "hooklane console") {
					t.Errorf("GET %s without the token: %d %q; want 401 with a Basic challenge, no page", path, p.status, p.header.Get("WWW-Authenticate"))
				}
				continue
			}
			if p.status != want {
				t.Errorf("GET %s: %d, want %d\n%.500s", path, p.status, want, p.body)
			}
			if !strings.HasPrefix(path, "/console/static/") && p.header.Get("Cache-Control") != "no-store" {
				t.Errorf("GET %s: Cache-Control %q, want no-store", path, p.header.Get("Cache-Control"))
			}
		}
	}
	// The pages' only script is the static one: nothing inline to allow.
	body := b.consoleGet(t, "/console/subscribers/s").body
	if n := strings.Count(body, "<script"); n != 1 || !strings.Contains(body, `<script src="/console/static/console.js" defer></script>`) {
		t.Errorf("%d script elements; want only the static console.js", n)
	}
	if p := b.console(t, "GET", "/console", nil, nil, true); p.status != http.StatusFound {
		t.Errorf("GET /console: %d, want a redirect to /console/", p.status)
	}
}

// An action is refused (403, nothing done) unless it comes from the
// console's own origin with its form's token for that very action.
func TestConsoleFormsRefuseCrossSiteRequests(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "http://127.0.0.1:9/x"})
	html := b.consoleGet(t, "/console/subscribers/s").body
	pause := formToken(t, html, "/console/subscribers/s/pause")
	test := formToken(t, html, "/console/subscribers/s/test")
	other, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: "another-token-0123456789", RedisConfig: deploy.RedisConfig{URL: redisSrv.URL},
		Namespace: b.ns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherSrv := newServer(t, other.Handler())
	otherReq, _ := http.NewRequest("GET", otherSrv.URL+"/console/subscribers/s", nil)
	otherReq.SetBasicAuth("x", "another-token-0123456789")
	resp, err := otherSrv.Client().Do(otherReq)
	if err != nil {
		t.Fatal(err)
	}
	otherPage, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	otherKey := formToken(t, string(otherPage), "/console/subscribers/s/pause")

	same := map[string]string{"Origin": b.srv.URL, "Sec-Fetch-Site": "same-origin"}
	for _, c := range []struct {
		name string
		form url.Values
		hdr  map[string]string
	}{
		{"no token", url.Values{}, same},
		{"empty token", url.Values{"csrf": {""}}, same},
		{"another action's token", url.Values{"csrf": {test}}, same},
		{"another server's token", url.Values{"csrf": {otherKey}}, same},
		{"cross-site, with the token", url.Values{"csrf": {pause}}, map[string]string{"Origin": "http://evil.test", "Sec-Fetch-Site": "cross-site"}},
		{"same-site other origin", url.Values{"csrf": {pause}}, map[string]string{"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}},
		{"Origin alone, another host", url.Values{"csrf": {pause}}, map[string]string{"Origin": "http://evil.test"}},
		{"Referer alone, another host", url.Values{"csrf": {pause}}, map[string]string{"Referer": "http://evil.test/page"}},
	} {
		p := b.console(t, "POST", "/console/subscribers/s/pause", c.form, c.hdr, true)
		if p.status != http.StatusForbidden || !strings.Contains(p.body, `id="error-message"`) {
			t.Errorf("%s: %d; want 403 with the reason\n%.300s", c.name, p.status, p.body)
		}
	}
	if sub, err := b.p.GetSubscriber(t.Context(), "s"); err != nil || sub.Paused {
		t.Fatalf("after refused pauses: paused %v, %v", sub.Paused, err)
	}
	// Without the credentials, not even a form is looked at.
	if p := b.console(t, "POST", "/console/subscribers/s/pause", url.Values{"csrf": {pause}}, same, false); p.status != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", p.status)
	}
	p := b.console(t, "POST", "/console/subscribers/s/pause", url.Values{"csrf": {pause}}, same, true)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/subscribers/s?done=paused" {
		t.Fatalf("the console's own form: %d %q; want 303 to the subscriber", p.status, p.header.Get("Location"))
	}
	if sub, err := b.p.GetSubscriber(t.Context(), "s"); err != nil || !sub.Paused {
		t.Fatalf("after the pause: paused %v, %v", sub.Paused, err)
	}
	// A client that is not a browser (no Origin, Sec-Fetch-Site or
	// Referer) still needs the token.
	if p := b.console(t, "POST", "/console/subscribers/s/resume", url.Values{}, nil, true); p.status != http.StatusForbidden {
		t.Errorf("resume without headers or token: %d, want 403", p.status)
	}
}

// What a receiver answers and what a publisher sends is shown as text on
// every page: a <script> body and an attribute-breaking payload come out
// escaped, never as markup.
func TestConsoleEscapesReceiverAndPublisherData(t *testing.T) {
	b := setup(t, fastRetries)
	const body = `<script>window.__pwned=1</script>`
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, body)
	})
	b.call(t, "PUT", "/v1/subscribers/h", map[string]any{"url": s.URL, "max_attempts": 1})
	b.call(t, "POST", "/v1/events", `{"id":"evil","type":"t","data":{"note":"\"><img src=x onerror=window.__pwned=2>"}}`)
	b.waitState(t, "h", "evil", tasks.StateDead)
	for _, path := range []string{"/console/subscribers/h/deliveries/evil", "/console/events/evil", "/console/subscribers/h"} {
		p := b.consoleGet(t, path)
		if p.status != 200 {
			t.Fatalf("GET %s: %d\n%s", path, p.status, p.body)
		}
		for _, raw := range []string{"<script>window", "<img src=x", "onerror=window.__pwned=2>"} {
			if strings.Contains(p.body, raw) {
				t.Errorf("GET %s shows %q as markup", path, raw)
			}
		}
	}
	d := b.consoleGet(t, "/console/subscribers/h/deliveries/evil").body
	for _, shown := range []string{`&lt;script&gt;window.__pwned=1&lt;/script&gt;`, `&#34;&gt;&lt;img src=x onerror=window.__pwned=2&gt;`} {
		if !strings.Contains(d, shown) {
			t.Errorf("the delivery page does not show %s as text\n%s", shown, d)
		}
	}
}

// No page shows a signing secret, nor puts one in a URL: the rotation's
// answer shows the new one once, uncached, and it is never shown again.
func TestConsoleShowsSecretsOnlyOnRotation(t *testing.T) {
	b := setup(t, nil)
	const old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "http://127.0.0.1:9/x", "secrets": []string{old}})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":{"k":"`+old+`"},"not_before":"`+later()+`"}`)
	pages := []string{"/console/subscribers", "/console/subscribers/s", "/console/subscribers/s/deliveries/e1", "/console/events/e1"}
	for _, path := range pages {
		if p := b.consoleGet(t, path); p.status != 200 || strings.Contains(html.UnescapeString(p.body), old) {
			t.Fatalf("GET %s: %d, shows the secret", path, p.status)
		}
	}
	if d := b.consoleGet(t, "/console/events/e1").body; !strings.Contains(d, "whsec_[redacted]") {
		t.Errorf("the event's data holds a secret: want it redacted on the page\n%s", d)
	}

	p := b.consolePost(t, "/console/subscribers/s", "/console/subscribers/s/rotate", url.Values{"grace": {"1h"}})
	shown := html.UnescapeString(p.body) // html/template writes a secret's "+" as "&#43;"
	sub, err := b.p.GetSubscriber(t.Context(), "s")
	if err != nil || len(sub.Secrets) != 1 || sub.Secrets[0] == old {
		t.Fatalf("after the rotation: %v, %v", sub.Secrets, err)
	}
	fresh := sub.Secrets[0]
	if p.status != 200 || p.header.Get("Location") != "" || p.header.Get("Cache-Control") != "no-store" || strings.Count(shown, fresh) != 1 || strings.Contains(shown, old) {
		t.Fatalf("rotation answer: %d, Location %q, Cache-Control %q, shows the new secret %d times, the old one %v",
			p.status, p.header.Get("Location"), p.header.Get("Cache-Control"), strings.Count(shown, fresh), strings.Contains(shown, old))
	}
	for _, path := range pages {
		if p := html.UnescapeString(b.consoleGet(t, path).body); strings.Contains(p, fresh) || strings.Contains(p, old) {
			t.Errorf("GET %s shows a secret after the rotation", path)
		}
	}
	if s := b.consoleGet(t, "/console/subscribers/s").body; !regexp.MustCompile(`1 signing; one retiring, signs until <time`).MatchString(s) {
		t.Errorf("the subscriber page does not count the secrets (1 signing, 1 retiring)")
	}
}

// The search goes to an event, a delivery or a subscriber by id; the list
// filters by state and id prefix and pages on; the deliveries filter by
// state.
func TestConsoleFindsAndFilters(t *testing.T) {
	b := setup(t, nil)
	for _, id := range []string{"a-1", "a-2", "a-3", "b-1"} {
		b.call(t, "PUT", "/v1/subscribers/"+id, map[string]any{"url": "http://127.0.0.1:9/x", "paused": id == "a-2"})
	}
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1,"not_before":"`+later()+`"}`)
	for q, want := range map[string]string{
		"e1": "/console/events/e1", "a-1:e1": "/console/subscribers/a-1/deliveries/e1", "b-1": "/console/subscribers/b-1",
	} {
		if p := b.consoleGet(t, "/console/search?q="+url.QueryEscape(q)); p.status != http.StatusSeeOther || p.header.Get("Location") != want {
			t.Errorf("search %s: %d %q; want 303 to %s", q, p.status, p.header.Get("Location"), want)
		}
	}
	if p := b.consoleGet(t, "/console/search?q=nope"); p.status != 404 || !strings.Contains(p.body, `id="not-found"`) {
		t.Errorf("search for nothing: %d", p.status)
	}
	rows := func(html string) []string {
		var ids []string
		for _, m := range regexp.MustCompile(`<tr data-subscriber="([^"]+)"`).FindAllStringSubmatch(html, -1) {
			ids = append(ids, m[1])
		}
		return ids
	}
	for query, want := range map[string]string{
		"":                         "[a-1 a-2 a-3 b-1]",
		"?state=paused":            "[a-2]",
		"?q=a-":                    "[a-1 a-2 a-3]",
		"?q=a-2":                   "[a-2]",
		"?q=a&state=paused":        "[a-2]",
		"?state=cooling":           "[]",
		"?limit=2":                 "[a-1 a-2]",
		"?limit=2&after=a-2":       "[a-3 b-1]",
		"?q=a&limit=2":             "[a-1 a-2]",
		"?q=a&limit=2&after=a-2":   "[a-3]",
		"?q=a-2&limit=1":           "[a-2]",
		"?q=a-2&limit=1&after=a-2": "[]",
	} {
		p := b.consoleGet(t, "/console/subscribers"+query)
		if got := fmt.Sprint(rows(p.body)); p.status != 200 || got != want {
			t.Errorf("subscribers%s: %d %s; want %s", query, p.status, got, want)
		}
	}
	if p := b.consoleGet(t, "/console/subscribers?limit=2"); !strings.Contains(p.body, `href="/console/subscribers?after=a-2&amp;limit=2"`) {
		t.Errorf("the first page of 2 links no next page\n%s", p.body)
	}
	for state, want := range map[string]bool{"scheduled": true, "delivered": false} {
		p := b.consoleGet(t, "/console/subscribers/a-1?state="+state)
		if got := strings.Contains(p.body, `<tr data-event="e1">`); p.status != 200 || got != want {
			t.Errorf("a-1's deliveries, state %s: %d, lists e1: %v", state, p.status, got)
		}
	}
	if p := b.consoleGet(t, "/console/subscribers/a-1?since="+url.QueryEscape(time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04"))); strings.Contains(p.body, `<tr data-event="e1">`) {
		t.Errorf("a-1's deliveries published from an hour on list e1")
	}
}
