package web_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// anySecret matches what is left of a secret: whsec_ and one more secret character.
var anySecret = regexp.MustCompile(`whsec_[A-Za-z0-9+/=_\-]`)

func TestRedact(t *testing.T) {
	sec, _ := tasks.NewSecret()
	tests := []struct {
		name, in string
		want     []string // substrings of the output
	}{
		{"json value", `{"secret":"` + sec + `","n":1.50}`, []string{`"secret": "whsec_[redacted]"`, `"n": 1.50`}},
		{"escaped in json", `{"s":"whsec\u005fAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`, []string{"whsec_[redacted]"}},
		{"json key", `{"` + sec + `":true}`, []string{`"whsec_[redacted]": true`}},
		{"nested", `[{"a":["x ` + sec + ` y"]}]`, []string{`"x whsec_[redacted] y"`}},
		{"html kept readable", `{"u":"https://a.test/?a=1&b=<2>"}`, []string{`"https://a.test/?a=1&b=<2>"`}},
		{"plain text", "Authorization: " + sec, []string{"Authorization: whsec_[redacted]"}},
		{"not utf-8", "\xff\xfe" + sec, []string{"not UTF-8"}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		got := web.Redact([]byte(tt.in))
		if anySecret.MatchString(got) {
			t.Errorf("%s: secret shown: %s", tt.name, got)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q does not contain %q", tt.name, got, w)
			}
		}
	}
	huge := `"` + strings.Repeat("é", 100<<10) + `"`
	if got := web.Redact([]byte(huge)); len(got) > 70<<10 || !strings.Contains(got, "more bytes not shown") {
		t.Errorf("huge payload shown as %d bytes", len(got))
	}
	// A real delivery payload shows as indented JSON with the event intact.
	d, _ := json.Marshal(tasks.Delivery{V: tasks.TaskVersion, SubscriberID: "s", EventID: "e"})
	if got := web.Redact(d); !strings.Contains(got, `"subscriber_id": "s"`) || !strings.Contains(got, `"event_id": "e"`) {
		t.Errorf("delivery payload shown as %s", got)
	}
}

func FuzzRedact(f *testing.F) {
	sec, _ := tasks.NewSecret()
	f.Add([]byte(`{"a":"` + sec + `"}`))
	f.Add([]byte(sec))
	f.Add([]byte(`{"s":"whsec\u005fAAAA"}`))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got := web.Redact(b); anySecret.MatchString(got) {
			t.Fatalf("Redact(%q) = %q shows a secret", b, got)
		}
	})
}

// asynqmon is read-only by default: with the right token, its buttons'
// API calls are refused and change nothing.
func TestMonitorIsReadOnly(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "http://127.0.0.1:9/x"})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`) // no worker: it stays pending
	q := tasks.Keys(b.ns).DeliveryQueue("", "s", tasks.LaneFresh, 1)
	for _, c := range []struct{ method, path string }{
		{"POST", "/monitoring/api/queues/" + q + ":pause"},
		{"DELETE", "/monitoring/api/queues/" + q + "/pending_tasks/s:e1"},
		{"POST", "/monitoring/api/queues/" + q + "/pending_tasks/s:e1:archive"},
		{"POST", "/monitoring/api/queues/" + q + "/pending_tasks:archive_all"},
	} {
		if r := b.call(t, c.method, c.path, nil); r.status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d %s, want 405 (read-only)", c.method, c.path, r.status, r.body)
		}
	}
	info, err := testkit.Task(b.insp, b.ns, "s:e1")
	if err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("task after the refused calls: %s; want it still pending", testkit.State(info, err))
	}
	if r := b.call(t, "GET", "/monitoring/api/queues/"+q, nil); r.status != 200 {
		t.Fatalf("reading still works: %d", r.status)
	}
}
