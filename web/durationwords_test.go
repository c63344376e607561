package web_test

import (
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// goDuration is a duration as time.Duration writes it: "168h0m0s", "1m0s".
var goDuration = regexp.MustCompile(`\b\d+h\d+m\d+s\b|\b\d+m\d+(\.\d+)?s\b`)

// Durations in error messages and console pages are written as a person
// would ("7 days", "30 days 1 hour", "24 hours", "36 hours", "10 per
// second"), not as time.Duration does ("168h0m0s"); the API's JSON keeps
// its Go durations, as openapi.json documents them.
func TestDurationsAreWords(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", `{"url":"http://127.0.0.1:9/x","rate_limit":{"rate":10,"burst":20,"period":"1s"},"retry_horizon":"36h"}`)

	far := time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct{ name, method, path, body, want string }{
		{"a not_before too far ahead", "POST", "/v1/events", `{"id":"e1","type":"t","data":1,"not_before":"` + far + `"}`, "at most 7 days ahead"},
		{"a grace too long", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":"721h"}`, "got 30 days 1 hour"},
	} {
		r := b.callRaw(t, c.method, c.path, c.body, bearer)
		msg, _ := r.json(t)["error"].(map[string]any)["message"].(string)
		if !strings.Contains(msg, c.want) || goDuration.MatchString(msg) {
			t.Errorf("%s: %d %q; want it to say %q, no Go duration", c.name, r.status, msg, c.want)
		}
	}

	page := html.UnescapeString(b.consoleGet(t, "/console/subscribers/s").body)
	for _, want := range []string{"10 per second, burst 20", "<dd>36 hours</dd>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the subscriber page does not say %q", want)
		}
	}
	if d := goDuration.FindString(page); d != "" {
		t.Errorf("the subscriber page shows %q", d)
	}
	rotated := b.consolePost(t, "/console/subscribers/s", "/console/subscribers/s/rotate", url.Values{"grace": {"24h"}})
	if body := html.UnescapeString(rotated.body); !strings.Contains(body, "beside it for 24 hours") || goDuration.MatchString(body) {
		t.Errorf("the rotation page: %d, does not say \"for 24 hours\":\n%s", rotated.status, body)
	}

	// The API's JSON answers ISO 8601, and reads it or a Go duration.
	sub := b.call(t, "GET", "/v1/subscribers/s", nil).json(t)
	if sub["retry_horizon"] != "PT36H" || sub["rate_limit"].(map[string]any)["period"] != "PT1S" {
		t.Errorf("GET /v1/subscribers/s: retry_horizon %v, rate_limit %v; want PT36H and period PT1S", sub["retry_horizon"], sub["rate_limit"])
	}
	r := b.call(t, "PUT", "/v1/subscribers/iso", map[string]any{"url": "https://a.test/h", "retry_horizon": "P7D",
		"rate_limit": map[string]any{"rate": 5, "burst": 5, "period": "PT0.5S"}})
	if got := r.json(t); r.status != 201 || got["retry_horizon"] != "PT168H" || got["rate_limit"].(map[string]any)["period"] != "PT0.5S" {
		t.Errorf("PUT with P7D and PT0.5S: %d %v; want 201, PT168H and PT0.5S", r.status, got)
	}
	for _, bad := range []string{"P", "PT", "P1M", "P1Y", "PT1.5H", "pt1s"} {
		if r := b.callRaw(t, "PUT", "/v1/subscribers/iso", map[string]any{"url": "https://a.test/h", "retry_horizon": bad}, bearer); r.status != 422 {
			t.Errorf("retry_horizon %q: %d %s; want 422", bad, r.status, r.body)
		}
	}
}
