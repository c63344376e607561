package web_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// A request's member names are matched exactly, and each is given once:
// a name that differs from a field's only in case is an unknown field (it
// says which name was meant), a name given twice is refused naming it,
// whatever the endpoint and however deep the name; and nothing refused is
// written.
func TestStrictMemberNames(t *testing.T) {
	b := setup(t, nil)
	for _, c := range []struct {
		name, method, path, body string
		code, field, says        string
	}{
		{"an upper-case id", "PUT", "/v1/subscribers/a", `{"ID":"a","url":"https://a.test"}`, "unknown_field", "ID", `"id"`},
		{"a capitalized url", "PUT", "/v1/subscribers/a", `{"Url":"https://a.test"}`, "unknown_field", "Url", `"url"`},
		{"a case-variant nested name", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"Rate":1,"burst":1,"period":"1s"}}`, "unknown_field", "rate_limit.Rate", `"rate"`},
		{"an unknown nested name", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":1,"burst":1,"period":"1s","jitter":1}}`, "unknown_field", "rate_limit.jitter", `unknown field "jitter"`},
		{"a duplicate id", "PUT", "/v1/subscribers/a", `{"id":"a","id":"b","url":"https://a.test"}`, "duplicate_field", "id", `"id" is given twice`},
		{"a duplicate url", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","url":"https://b.test"}`, "duplicate_field", "url", `"url" is given twice`},
		{"a duplicate nested name", "PUT", "/v1/subscribers/a", `{"url":"https://a.test","rate_limit":{"rate":1,"rate":2,"burst":1,"period":"1s"}}`, "duplicate_field", "rate_limit.rate", `"rate" is given twice`},
		{"an upper-case type and data", "POST", "/v1/events", `{"id":"e1","TYPE":"t","Data":{}}`, "unknown_field", "TYPE", `"type"`},
		{"a duplicate type", "POST", "/v1/events", `{"id":"e1","type":"t","type":"u","data":{}}`, "duplicate_field", "type", `"type" is given twice`},
		{"a duplicate subscriber_id", "POST", "/v1/events", `{"id":"e1","type":"t","data":1,"subscriber_id":"s","subscriber_id":"s"}`, "duplicate_field", "subscriber_id", "twice"},
		{"a case-variant replay filter", "POST", "/v1/dead-letters/replay", `{"Subscriber":"s"}`, "unknown_field", "Subscriber", `"subscriber"`},
		{"a duplicate replay filter", "POST", "/v1/dead-letters/replay", `{"all":true,"all":false}`, "duplicate_field", "all", "twice"},
		{"a case-variant grace", "POST", "/v1/subscribers/s/secrets/rotate", `{"GRACE":"1h"}`, "unknown_field", "GRACE", `"grace"`},
		{"a duplicate grace", "POST", "/v1/subscribers/s/secrets/rotate", `{"grace":"0s","grace":"1h"}`, "duplicate_field", "grace", "twice"},
	} {
		r := b.callRaw(t, c.method, c.path, c.body, bearer)
		code, field := r.errorOf(t)
		msg, _ := r.json(t)["error"].(map[string]any)["message"].(string)
		if r.status != 400 || code != c.code || field != c.field || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %s %q %q; want 400 %s %q saying %s", c.name, r.status, code, field, msg, c.code, c.field, c.says)
		}
	}
	// Data is the event's own: its names are the publisher's, any case.
	if r := b.call(t, "POST", "/v1/events", `{"id":"e2","type":"t","data":{"ID":1,"id":2}}`); r.status/100 != 2 {
		t.Errorf("an event whose data has names of any case: %d %s", r.status, r.body)
	}
	if subs, err := b.p.ListSubscribers(t.Context()); err != nil || len(subs) != 0 {
		t.Errorf("%d subscribers after refused writes (%v), want 0", len(subs), err)
	}
	if n := testkit.Totals(t, b.insp, b.ns).Size; n != 0 {
		t.Errorf("%d tasks after refused publishes", n)
	}
}

// A field left out takes its default, and one given is a value: a
// rate_limit without period is per second, max_in_flight left out is
// tasks.DefaultMaxInFlight, and max_in_flight 0 is refused naming the
// field and its range, not read as the default.
func TestLeftOutMeansDefault(t *testing.T) {
	b := setup(t, nil)
	var sub web.Subscriber
	r := b.call(t, "PUT", "/v1/subscribers/a", `{"url":"https://a.test/h","rate_limit":{"rate":5,"burst":7}}`)
	if err := json.Unmarshal(r.body, &sub); r.status != 201 || err != nil ||
		sub.RateLimit != (web.RateLimit{Rate: 5, Burst: 7, Period: "PT1S"}) || sub.MaxInFlight != tasks.DefaultMaxInFlight {
		t.Fatalf("a rate_limit without period: %d %s; want 5 per 1s, burst 7, max_in_flight %d", r.status, r.body, tasks.DefaultMaxInFlight)
	}
	r = b.callRaw(t, "PUT", "/v1/subscribers/a", `{"url":"https://a.test/h","max_in_flight":0}`, bearer)
	code, field := r.errorOf(t)
	msg, _ := r.json(t)["error"].(map[string]any)["message"].(string)
	if r.status != 422 || code != "invalid" || field != "max_in_flight" || !strings.Contains(msg, "1-10000") || !strings.Contains(msg, "got 0") {
		t.Fatalf("max_in_flight 0: %d %s; want 422 naming max_in_flight, its range and the 0", r.status, r.body)
	}
	if got, err := b.p.GetSubscriber(t.Context(), "a"); err != nil || got.MaxInFlight != tasks.DefaultMaxInFlight {
		t.Fatalf("after the refused PUT: %+v, %v; want it unchanged", got, err)
	}
}

// Malformed JSON is reported as such, whatever names or nulls come before
// the fault.
func TestMalformedBeforeNames(t *testing.T) {
	b := setup(t, nil)
	for _, body := range []string{`{"url":null,`, `{"ID":"a","url":"https://a.test"`, `{"url":"https://a.test","url":"x"} {}`} {
		r := b.callRaw(t, "PUT", "/v1/subscribers/a", body, bearer)
		if code, _ := r.errorOf(t); r.status != 400 || code != "bad_json" {
			t.Errorf("%s: %d %s; want 400 bad_json", body, r.status, r.body)
		}
	}
}
