package web_test

import (
	"strings"
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
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
