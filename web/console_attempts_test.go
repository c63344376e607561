package web_test

import (
	"html"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// headerRows are the name → value rows of the page's table of class
// "headers <which>" in attempt n.
func headerRows(t *testing.T, page string, n, which string) map[string]string {
	t.Helper()
	li := regexp.MustCompile(`(?s)<li class="attempt [a-z]+" data-attempt="` + n + `">(.*?)</li>`).FindStringSubmatch(page)
	if li == nil {
		t.Fatalf("no attempt %s on the page\n%s", n, page)
	}
	table := regexp.MustCompile(`(?s)<table class="headers ` + which + `">(.*?)</table>`).FindStringSubmatch(li[1])
	if table == nil {
		t.Fatalf("attempt %s shows no %s headers\n%s", n, which, li[1])
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`<tr><th>([^<]+)</th><td><code>([^<]*)</code></td></tr>`).FindAllStringSubmatch(table[1], -1) {
		out[html.UnescapeString(m[1])] = html.UnescapeString(m[2])
	}
	return out
}

// A delivery's page shows, for each attempt, the headers the request was
// sent with (the signature cut to its first characters, never whole, no
// secret), the answer's status, latency, headers and body; and once, the
// body sent, byte for byte as the receiver got it.
func TestConsoleDeliveryShowsTheRequest(t *testing.T) {
	b := setup(t, fastRetries)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		w.Header().Set("X-Receipt", "r-42")
		if n == 0 {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "try later")
			return
		}
		io.WriteString(w, "stored")
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL, "secrets": []string{secret}})
	const data = `{"order":7,  "note":"<b>as sent</b>", "key":"` + secret + `"}` // spacing kept as published
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"order.created","data":`+data+`}`)
	b.waitState(t, "s", "e1", tasks.StateDelivered)

	p := b.consoleGet(t, "/console/subscribers/s/deliveries/e1")
	if p.status != 200 {
		t.Fatalf("GET the delivery: %d\n%s", p.status, p.body)
	}
	got := s.Got()
	if len(got) != 2 {
		t.Fatalf("the receiver got %d requests, want 2", len(got))
	}
	for i, n := range []string{"1", "2"} {
		sent := headerRows(t, p.body, n, "request")
		sig := got[i].Header.Get("Webhook-Signature")
		if want := sig[:len("v1,")+6] + "…"; sent["Webhook-Signature"] != want {
			t.Errorf("attempt %s: signature shown %q, want %q (the receiver got %q)", n, sent["Webhook-Signature"], want, sig)
		}
		for _, name := range []string{"Webhook-Id", "Webhook-Timestamp", "Content-Type", "User-Agent"} {
			if sent[name] == "" || sent[name] != got[i].Header.Get(name) {
				t.Errorf("attempt %s: %s shown %q, the receiver got %q", n, name, sent[name], got[i].Header.Get(name))
			}
		}
		if strings.Contains(html.UnescapeString(p.body), sig) {
			t.Errorf("attempt %s: the whole signature is on the page", n)
		}
		if resp := headerRows(t, p.body, n, "response"); resp["X-Receipt"] != "r-42" || resp["Date"] == "" {
			t.Errorf("attempt %s: response headers shown %v; want X-Receipt r-42 and a Date", n, resp)
		}
	}
	shown := html.UnescapeString(p.body)
	if strings.Contains(shown, secret) {
		t.Error("the page shows the signing secret")
	}
	for _, want := range []string{"HTTP 500", "try later", "HTTP 200", "stored"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the page does not show %q", want)
		}
	}
	// Latency always: a loopback 200 often comes back within the millisecond.
	if n := len(regexp.MustCompile(`<span class="latency muted">(&lt; 1|[0-9]+) ms</span>`).FindAllString(p.body, -1)); n != 2 {
		t.Errorf("%d attempts show a latency, want both", n)
	}
	m := regexp.MustCompile(`(?s)<pre class="payload" id="payload">(.*?)</pre>`).FindStringSubmatch(p.body)
	want := strings.ReplaceAll(string(got[1].Body), secret, "whsec_[redacted]")
	if m == nil || html.UnescapeString(m[1]) != want || !strings.Contains(want, `{"order":7,  "note"`) {
		t.Errorf("body shown:\n%v\nwant as sent, the secret redacted:\n%s", m, want)
	}
}
