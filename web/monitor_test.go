package web_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

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
	d, _ := json.Marshal(tasks.Delivery{SubscriberID: "s", Event: tasks.Event{ID: "e", Type: "t", Data: json.RawMessage(`{"k":"v"}`)}})
	if got := web.Redact(d); !strings.Contains(got, `"subscriber_id": "s"`) || !strings.Contains(got, `"k": "v"`) {
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
