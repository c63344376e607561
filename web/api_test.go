package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

func TestSubscriberEndpoints(t *testing.T) {
	b := setup(t, nil)
	put := map[string]any{"url": "https://crm.acme.example/hooks", "event_types": []string{"video.*"},
		"rate_limit": map[string]any{"rate": 5, "burst": 10, "period": "1s"}, "max_in_flight": 4}

	r := b.call(t, "PUT", "/v1/subscribers/acme-crm", put)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created struct {
		Secrets   []string       `json:"secrets"`
		RateLimit map[string]any `json:"rate_limit"`
	}
	json.Unmarshal(r.body, &created)
	if len(created.Secrets) != 1 || tasks.ValidateSecret(created.Secrets[0]) != nil {
		t.Fatalf("create did not return the generated secret: %s", r.body)
	}
	if created.RateLimit["period"] != "PT1S" || created.RateLimit["rate"] != 5.0 {
		t.Fatalf("rate_limit %v", created.RateLimit)
	}

	put["url"] = "https://crm.acme.example/hooks/v2"
	r = b.call(t, "PUT", "/v1/subscribers/acme-crm", put)
	if r.status != http.StatusOK || strings.Contains(string(r.body), "whsec_") {
		t.Fatalf("replace: %d %s; want 200 without secrets", r.status, r.body)
	}
	stored, err := b.p.GetSubscriber(t.Context(), "acme-crm")
	if err != nil || stored.URL != put["url"] || len(stored.Secrets) == 0 || stored.Secrets[0] != created.Secrets[0] {
		t.Fatalf("after replace: %+v; want the new URL and the same secret", stored)
	}

	r = b.call(t, "GET", "/v1/subscribers/acme-crm", nil)
	if r.status != 200 || strings.Contains(string(r.body), "whsec_") || r.json(t)["url"] != put["url"] || r.json(t)["metrics"] != false {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	// Marked for series of its own in /metrics, then unmarked by a PUT without it.
	put["metrics"] = true
	if r = b.call(t, "PUT", "/v1/subscribers/acme-crm", put); r.status != 200 || r.json(t)["metrics"] != true {
		t.Fatalf("mark for metrics: %d %s", r.status, r.body)
	}
	delete(put, "metrics")
	if r = b.call(t, "PUT", "/v1/subscribers/acme-crm", put); r.status != 200 || r.json(t)["metrics"] != false {
		t.Fatalf("PUT without metrics: %d %s; want it unmarked", r.status, r.body)
	}
	b.call(t, "PUT", "/v1/subscribers/b", map[string]any{"url": "http://127.0.0.1:9/x"})
	r = b.call(t, "GET", "/v1/subscribers", nil)
	var list struct{ Subscribers []struct{ ID string } }
	json.Unmarshal(r.body, &list)
	if r.status != 200 || len(list.Subscribers) != 2 || list.Subscribers[0].ID != "acme-crm" || strings.Contains(string(r.body), "whsec_") {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	if r = b.call(t, "POST", "/v1/subscribers/acme-crm/pause", nil); r.status != 200 || r.json(t)["paused"] != true {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r = b.call(t, "POST", "/v1/subscribers/acme-crm/resume", nil); r.status != 200 || r.json(t)["paused"] != false {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}

	r = b.call(t, "POST", "/v1/subscribers/acme-crm/secrets/rotate", map[string]string{"grace": "1h"})
	var rotated struct {
		Secrets  []string    `json:"secrets"`
		Retiring []time.Time `json:"retiring_secrets_until"`
	}
	json.Unmarshal(r.body, &rotated)
	if r.status != 200 || len(rotated.Secrets) != 1 || rotated.Secrets[0] == created.Secrets[0] || len(rotated.Retiring) != 1 {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	if stored, err = b.p.GetSubscriber(t.Context(), "acme-crm"); err != nil {
		t.Fatal(err)
	}
	if got := stored.SigningSecrets(time.Now()); !slices.Equal(got, []string{rotated.Secrets[0], created.Secrets[0]}) {
		t.Fatalf("signing secrets after rotation: %v", got)
	}
	if r = b.call(t, "POST", "/v1/subscribers/acme-crm/secrets/rotate", nil); r.status != 200 {
		t.Fatalf("rotate without a body (default grace): %d %s", r.status, r.body)
	}

	if r = b.call(t, "DELETE", "/v1/subscribers/acme-crm", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/subscribers/acme-crm"}, {"DELETE", "/v1/subscribers/acme-crm"},
		{"POST", "/v1/subscribers/acme-crm/pause"}, {"GET", "/v1/subscribers/acme-crm/status"},
		{"POST", "/v1/subscribers/acme-crm/secrets/rotate"},
	} {
		r = b.call(t, c.method, c.path, nil)
		if code, _ := r.errorOf(t); r.status != 404 || code != "unknown_subscriber" {
			t.Errorf("%s %s after delete: %d %s", c.method, c.path, r.status, r.body)
		}
	}
}

func TestValidationErrors(t *testing.T) {
	b := setup(t, nil)
	good := `{"url":"https://a.test/h"}`
	big := `{"id":"e1","type":"t","data":"` + strings.Repeat("x", 300<<10) + `"}`
	huge := `{"id":"e1","type":"t","data":"` + strings.Repeat("x", 2<<20) + `"}`
	tests := []struct {
		name, method, path, body string
		status                   int
		code, field              string
	}{
		{"malformed", "PUT", "/v1/subscribers/a", `{"url":`, 400, "bad_json", ""},
		{"empty body", "PUT", "/v1/subscribers/a", ``, 400, "bad_json", ""},
		{"trailing data", "PUT", "/v1/subscribers/a", good + `{}`, 400, "bad_json", ""},
		{"unknown field", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","urls":[]}`, 400, "unknown_field", "urls"},
		{"unknown nested field", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":1,"burst":1,"period":"1s","jitter":1}}`, 400, "unknown_field", "rate_limit.jitter"},
		{"wrong type", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","max_in_flight":"4"}`, 400, "bad_json", "max_in_flight"},
		{"bad id", "PUT", "/v1/subscribers/a:b", good, 422, "invalid", "id"},
		{"id mismatch", "PUT", "/v1/subscribers/a", `{"id":"b","url":"https://a.test"}`, 422, "invalid", "id"},
		{"bad url", "PUT", "/v1/subscribers/a", `{"url":"ftp://a.test"}`, 422, "invalid", "url"},
		{"no url", "PUT", "/v1/subscribers/a", `{}`, 422, "invalid", "url"},
		// Literal addresses the worker's SSRF guard refuses: refused when
		// written, naming the allowlist (the tests allow loopback only).
		{"private address", "PUT", "/v1/subscribers/a", `{"url":"http://10.0.0.1/h"}`, 422, "invalid", "url"},
		{"metadata address", "PUT", "/v1/subscribers/a", `{"url":"http://169.254.169.254/latest"}`, 422, "invalid", "url"},
		{"unspecified address", "PUT", "/v1/subscribers/a", `{"url":"http://0.0.0.0:8080/"}`, 422, "invalid", "url"},
		{"bad secret", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","secrets":["hunter2"]}`, 422, "invalid", "secrets"},
		{"zero max_in_flight", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","max_in_flight":0}`, 422, "invalid", "max_in_flight"},
		{"max_in_flight past its maximum", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","max_in_flight":10001}`, 422, "invalid", "max_in_flight"},
		{"empty period", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":1,"burst":1,"period":""}}`, 422, "invalid", "rate_limit.period"},
		{"null period", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":1,"burst":1,"period":null}}`, 422, "invalid", "rate_limit.period"},
		{"zero rate", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":0,"burst":1,"period":"1s"}}`, 422, "invalid", "rate_limit.rate"},
		{"bad period", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":1,"burst":1,"period":"soon"}}`, 422, "invalid", "rate_limit.period"},
		{"bad filter", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","event_types":["*"]}`, 422, "invalid", "event_types"},
		{"metrics not a boolean", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","metrics":"yes"}`, 422, "invalid", "metrics"},
		{"metrics a number", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","metrics":1}`, 422, "invalid", "metrics"},
		{"bad horizon", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","retry_horizon":"forever"}`, 422, "invalid", "retry_horizon"},
		{"horizon of microseconds", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","retry_horizon":"3.031µs"}`, 422, "invalid", "retry_horizon"},
		{"event without id", "POST", "/v1/events", `{"type":"t","data":{}}`, 422, "invalid", "id"},
		{"event without data", "POST", "/v1/events", `{"id":"e1","type":"t"}`, 422, "invalid", "data"},
		{"event bad not_before", "POST", "/v1/events", `{"id":"e1","type":"t","data":1,"not_before":"tomorrow"}`, 422, "invalid", "not_before"},
		{"event data too large", "POST", "/v1/events", big, 413, "payload_too_large", "data"},
		{"body too large", "POST", "/v1/events", huge, 413, "body_too_large", ""},
		{"event to unknown subscriber", "POST", "/v1/events", `{"id":"e1","type":"t","data":1,"subscriber_id":"nobody"}`, 404, "unknown_subscriber", ""},
		{"replay without a filter", "POST", "/v1/dead-letters/replay", `{}`, 422, "invalid", "subscriber"},
		{"dead letters bad limit", "GET", "/v1/dead-letters?limit=0", ``, 422, "invalid", "limit"},
		{"unknown dead letter", "DELETE", "/v1/dead-letters/a:e1", ``, 404, "unknown_dead_letter", ""},
		{"bad grace", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":"-1h"}`, 422, "invalid", "grace"},
		{"empty grace", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":""}`, 422, "invalid", "grace"},
		{"grace of microseconds", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":"3µs"}`, 422, "invalid", "grace"},
		{"grace of seconds", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":"59s"}`, 422, "invalid", "grace"},
		{"grace past its maximum", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":"721h"}`, 422, "invalid", "grace"},
		{"period of microseconds", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":1,"burst":1,"period":"500µs"}}`, 422, "invalid", "rate_limit.period"},
		{"period past its maximum", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":1,"burst":1,"period":"25h"}}`, 422, "invalid", "rate_limit.period"},
		{"negative horizon", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","retry_horizon":"-1h"}`, 422, "invalid", "retry_horizon"},
		{"horizon past its maximum", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","retry_horizon":"721h"}`, 422, "invalid", "retry_horizon"},
		{"null not_before", "POST", "/v1/events", `{"id":"e1","type":"t","data":1,"not_before":null}`, 422, "invalid", "not_before"},
		{"empty subscriber_id", "POST", "/v1/events", `{"id":"e1","type":"t","data":1,"subscriber_id":""}`, 422, "invalid", "subscriber_id"},
		{"null metrics", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","metrics":null}`, 422, "invalid", "metrics"},
		{"include_replayed not a boolean", "GET", "/v1/dead-letters?include_replayed=banana", ``, 422, "invalid", "include_replayed"},
		{"wrong method", "PATCH", "/v1/subscribers/a", good, 405, "method_not_allowed", ""},
		{"no such endpoint", "GET", "/v1/nothing", ``, 404, "not_found", ""},
	}
	b.call(t, "PUT", "/v1/subscribers/s", good)
	for _, tt := range tests {
		r := b.callRaw(t, tt.method, tt.path, tt.body, bearer) // every one is off the contract
		code, field := r.errorOf(t)
		if r.status != tt.status || code != tt.code || field != tt.field {
			t.Errorf("%s: %d %s %q; want %d %s %q\n%s", tt.name, r.status, code, field, tt.status, tt.code, tt.field, r.body)
		}
	}
	// Nothing refused was written: one subscriber (s), no task.
	if subs, err := b.p.ListSubscribers(t.Context()); err != nil || len(subs) != 1 {
		t.Errorf("%d subscribers after refused writes (%v), want 1", len(subs), err)
	}
	if n := testkit.Totals(t, b.insp, b.ns).Size; n != 0 {
		t.Errorf("%d tasks after refused publishes", n)
	}
}

// Go's own wording, which no error answer may carry: a type or package
// name, the reference layout of time.Parse, a parser's name.
var goWording = []string{"Go struct", "Go value", "json: ", "2006-01-02", "strconv.", `parse "`, "web.", "tasks.",
	"time.ParseDuration", "time: ", "unmarshal", "net/url", "Time.", "reflect"}

// speaksGo returns the first of goWording in msg ("" for none).
func speaksGo(msg string) string {
	for _, w := range goWording {
		if strings.Contains(strings.ToLower(msg), strings.ToLower(w)) {
			return w
		}
	}
	return ""
}

// Every refused input is answered in plain words: the field named, what it
// wants, what it got, and nothing of Go's wording (type names, time.Parse's
// layout, a parser's own message). Through the real HTTP API, and the CLI's
// own flags.
func TestErrorsSpeakPlainly(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", `{"url":"https://a.test/h"}`)
	ev := func(extra string) string { return `{"id":"e1","type":"t","data":1,` + extra + `}` }
	sub := func(extra string) string { return `{"url":"https://a.test/h",` + extra + `}` }
	tests := []struct {
		name, method, path, body string
		status                   int
		field, says              string // says: what the message must contain
	}{
		{"in-flight as a string", "PUT", "/v1/subscribers/a", sub(`"max_in_flight":"8"`), 400, "max_in_flight", `got "8"`},
		{"in-flight a fraction", "PUT", "/v1/subscribers/a", sub(`"max_in_flight":1.5`), 400, "max_in_flight", "whole number"},
		{"in-flight past int64", "PUT", "/v1/subscribers/a", sub(`"max_in_flight":99999999999999999999`), 400, "max_in_flight", "whole number"},
		{"attempts as a string", "PUT", "/v1/subscribers/a", sub(`"max_attempts":"3"`), 400, "max_attempts", "whole number"},
		{"rate as a string", "PUT", "/v1/subscribers/a", sub(`"rate_limit":{"rate":"5","burst":5,"period":"1s"}`), 400, "rate_limit.rate", `got "5"`},
		{"rate_limit as a string", "PUT", "/v1/subscribers/a", sub(`"rate_limit":"fast"`), 400, "rate_limit", "object"},
		{"event_types as a string", "PUT", "/v1/subscribers/a", sub(`"event_types":"video.*"`), 400, "event_types", "array"},
		{"an event type a number", "PUT", "/v1/subscribers/a", sub(`"event_types":[1]`), 400, "event_types", "entries are each a string"},
		{"paused as a string", "PUT", "/v1/subscribers/a", sub(`"paused":"yes"`), 400, "paused", "true or false"},
		{"url a number", "PUT", "/v1/subscribers/a", `{"url":5}`, 400, "url", "string"},
		{"body an array", "PUT", "/v1/subscribers/a", `[]`, 400, "", "object"},
		{"url with a bad host", "PUT", "/v1/subscribers/a", `{"url":"http://[::1"}`, 422, "url", "URL"},
		{"url with a colon first", "PUT", "/v1/subscribers/a", `{"url":"1http://a.test"}`, 422, "url", "URL"},
		{"url with a control character", "PUT", "/v1/subscribers/a", `{"url":"https://a.test/\u0001"}`, 422, "url", "URL"},
		{"url with a bad port", "PUT", "/v1/subscribers/a", `{"url":"https://a.test:port/"}`, 422, "url", "URL"},
		{"horizon not a duration", "PUT", "/v1/subscribers/a", sub(`"retry_horizon":"forever"`), 422, "retry_horizon", `"forever"`},
		{"period not a duration", "PUT", "/v1/subscribers/a", sub(`"rate_limit":{"rate":1,"burst":1,"period":"soon"}`), 422, "rate_limit.period", `"soon"`},
		{"grace a number", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":5}`, 400, "grace", "string"},
		{"grace not a duration", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":"soon"}`, 422, "grace", `"soon"`},
		{"not_before not a time", "POST", "/v1/events", ev(`"not_before":"tomorrow"`), 422, "not_before", `got "tomorrow"`},
		{"not_before a number", "POST", "/v1/events", ev(`"not_before":1700000000`), 400, "not_before", "RFC 3339"},
		{"timestamp without a zone", "POST", "/v1/events", ev(`"timestamp":"2026-12-02 15:04:05"`), 422, "timestamp", "RFC 3339"},
		{"skip_paused as a string", "POST", "/v1/events", ev(`"skip_paused":"true"`), 400, "skip_paused", "true or false"},
		{"event id a number", "POST", "/v1/events", `{"id":1,"type":"t","data":1}`, 400, "id", "string"},
		{"replay since not a time", "POST", "/v1/dead-letters/replay", `{"since":"yesterday"}`, 422, "since", `"yesterday"`},
		{"replay ids a string", "POST", "/v1/dead-letters/replay", `{"ids":"s:e1"}`, 400, "ids", "array"},
		{"replay limit as a string", "POST", "/v1/dead-letters/replay", `{"all":true,"limit":"10"}`, 400, "limit", "whole number"},
		{"dead letters since", "GET", "/v1/dead-letters?since=yesterday", ``, 422, "since", `"yesterday"`},
		{"dead letters until", "GET", "/v1/dead-letters?until=2026-12-02", ``, 422, "until", "RFC 3339"},
		{"dead letters limit", "GET", "/v1/dead-letters?limit=ten", ``, 422, "limit", `"ten"`},
		{"dead letters cursor", "GET", "/v1/dead-letters?cursor=zz!", ``, 422, "cursor", "next_cursor"},
		{"deliveries since", "GET", "/v1/subscribers/s/deliveries?since=1700000000", ``, 422, "since", "RFC 3339"},
		{"deliveries limit", "GET", "/v1/subscribers/s/deliveries?limit=-1", ``, 422, "limit", `"-1"`},
		{"deliveries cursor", "GET", "/v1/subscribers/s/deliveries?cursor=zz!", ``, 422, "cursor", "next_cursor"},
		{"subscribers limit", "GET", "/v1/subscribers?limit=lots", ``, 422, "limit", `"lots"`},
		{"subscriber id in the path", "GET", "/v1/subscribers/a:b", ``, 422, "id", "characters"},
		{"event id in the path", "GET", "/v1/events/a%20b", ``, 422, "id", "characters"},
	}
	for _, tt := range tests {
		r := b.callRaw(t, tt.method, tt.path, tt.body, bearer)
		code, field := r.errorOf(t)
		msg, _ := r.json(t)["error"].(map[string]any)["message"].(string)
		if r.status != tt.status || field != tt.field || !strings.Contains(msg, tt.says) || speaksGo(msg) != "" {
			t.Errorf("%s: %d %s %q %q; want %d naming %q, saying %q, without Go's wording (%q)",
				tt.name, r.status, code, field, msg, tt.status, tt.field, tt.says, speaksGo(msg))
		}
	}
	// The CLI's own flags, refused before any request.
	env := map[string]string{"HOOKLANE_URL": b.srv.URL, "HOOKLANE_API_TOKEN": token}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"publish", "-type", "t", "-not-before", "tomorrow"}, "-not-before"},
		{[]string{"publish", "-type", "t", "-not-before", "+soon"}, "-not-before"},
		{[]string{"dead-letters", "replay", "-all", "-since", "yesterday"}, "-since"},
	} {
		err := b.cliRaw(t, env, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.says) || speaksGo(err.Error()) != "" {
			t.Errorf("%v: %v; want an error naming %s, without Go's wording (%q)", c.args, err, c.says, speaksGo(fmt.Sprint(err)))
		}
	}
}
