package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// The deliveries page lists the deliveries of every subscriber, a page of
// subscribers at a time, filtered by state, event type, last status, id
// prefix and publish time; and the dead letters of every subscriber.
func TestConsoleListsDeliveriesOfEverySubscriber(t *testing.T) {
	b := setup(t, fastRetries)
	ok := testkit.NewSink(t, nil)
	bad := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b.call(t, "PUT", "/v1/subscribers/a-ok", map[string]any{"url": ok.URL, "event_types": []string{"order.*"}})
	b.call(t, "PUT", "/v1/subscribers/b-bad", map[string]any{"url": bad.URL, "event_types": []string{"order.*"}, "max_attempts": 1})
	b.call(t, "PUT", "/v1/subscribers/c-later", map[string]any{"url": "http://127.0.0.1:9/x", "event_types": []string{"later.*"}})
	b.call(t, "POST", "/v1/events", `{"id":"o1","type":"order.created","data":1}`)
	b.call(t, "POST", "/v1/events", `{"id":"s1","type":"later.due","data":1,"not_before":"`+later()+`"}`)
	b.waitState(t, "a-ok", "o1", tasks.StateDelivered)
	b.waitState(t, "b-bad", "o1", tasks.StateDead)

	rows := func(html, attr string) string {
		var out []string
		for _, m := range regexp.MustCompile(`<tr data-`+attr+`="([^"]+)"`).FindAllStringSubmatch(html, -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return fmt.Sprint(out)
	}
	hour := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04"))
	for query, want := range map[string]string{
		"":                    "[a-ok:o1 b-bad:o1 c-later:s1]",
		"?state=delivered":    "[a-ok:o1]",
		"?state=scheduled":    "[c-later:s1]",
		"?type=order.*":       "[a-ok:o1 b-bad:o1]",
		"?type=later.due":     "[c-later:s1]",
		"?status=5xx":         "[b-bad:o1]",
		"?status=500":         "[b-bad:o1]",
		"?status=200":         "[a-ok:o1]",
		"?status=none":        "[]",
		"?q=s":                "[c-later:s1]",
		"?q=b-bad:o":          "[b-bad:o1]",
		"?subs=2":             "[a-ok:o1 b-bad:o1]",
		"?subs=2&after=b-bad": "[c-later:s1]",
		"?since=" + hour:      "[]",
	} {
		p := b.consoleGet(t, "/console/deliveries"+query)
		if got := rows(p.body, "delivery"); p.status != 200 || got != want {
			t.Errorf("deliveries%s: %d %s; want %s", query, p.status, got, want)
		}
	}
	if p := b.consoleGet(t, "/console/deliveries?subs=2&state=delivered"); !strings.Contains(p.body, `href="/console/deliveries?after=b-bad&amp;state=delivered&amp;subs=2"`) {
		t.Errorf("a page of 2 subscribers links no next page with its filters\n%s", p.body)
	}
	for query, want := range map[string]string{
		"": "[b-bad:o1]", "?status=5xx": "[b-bad:o1]", "?type=later.*": "[]", "?state=delivered": "[]", "?q=b-bad:": "[b-bad:o1]",
	} {
		p := b.consoleGet(t, "/console/deliveries"+query)
		if got := rows(p.body, "task"); got != want {
			t.Errorf("dead letters%s: %s; want %s", query, got, want)
		}
	}
	for _, bad := range []string{"?status=abc", "?status=600", "?state=lost", "?per=0", "?subs=101", "?after=..", "?since=yesterday"} {
		if p := b.consoleGet(t, "/console/deliveries"+bad); p.status != http.StatusUnprocessableEntity {
			t.Errorf("deliveries%s: %d, want 422", bad, p.status)
		}
	}
}
