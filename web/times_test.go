package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
)

// utcMillis is the one form of a time in an answer: RFC 3339, UTC, at most
// milliseconds (what Redis keeps).
var utcMillis = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$`)

// answerTimes calls f with the path and value of every string in the JSON
// answer v that reads as an RFC 3339 time.
func answerTimes(v any, path string, f func(path, s string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			answerTimes(e, path+"."+k, f)
		}
	case []any:
		for i, e := range x {
			answerTimes(e, fmt.Sprintf("%s[%d]", path, i), f)
		}
	case string:
		if _, err := time.Parse(time.RFC3339Nano, x); err == nil {
			f(path, x)
		}
	}
}

// Every time in every answer, whatever it was made from (a publisher's
// timestamp and not-before with nanoseconds and an offset, a replay's
// clock, a rotation's grace, a cooldown), is RFC 3339 in UTC to the
// millisecond: a delivery record, the delivery log, a dead letter, an
// event, a subscriber, its status and a publish's answer.
func TestEveryTimeIsUTCMilliseconds(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	cool := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL, "max_attempts": 1})
	b.call(t, "PUT", "/v1/subscribers/c", map[string]any{"url": cool.URL})
	answers := map[string]response{}
	answers["publish"] = b.call(t, "POST", "/v1/events",
		`{"id":"e1","type":"t","data":1,"subscriber_id":"s","timestamp":"2026-01-02T03:04:05.123456789+02:00"}`)
	b.call(t, "POST", "/v1/events", `{"id":"e2","type":"t","data":1,"subscriber_id":"c"}`)
	nb := time.Now().Add(time.Hour).In(time.FixedZone("", 2*3600)).Format(time.RFC3339Nano)
	answers["publish with not_before"] = b.call(t, "POST", "/v1/events", `{"id":"e3","type":"t","data":1,"subscriber_id":"c","not_before":"`+nb+`"}`)

	testkit.Eventually(t, 15*time.Second, "a dead letter", func() bool {
		r := b.call(t, "GET", "/v1/dead-letters?subscriber=s", nil)
		return len(r.json(t)["dead_letters"].([]any)) == 1
	})
	if r := b.call(t, "POST", "/v1/dead-letters/replay", map[string]any{"ids": []string{"s:e1"}}); r.status != http.StatusOK {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	b.waitState(t, "s", "e1", "delivered")
	// The event's timestamp is sent as it is answered.
	if got := s.Got(); len(got) != 2 || !bytes.Contains(got[1].Body, []byte(`"timestamp":"2026-01-02T01:04:05.123Z"`)) {
		t.Errorf("sent %d requests, the last %s; want the timestamp in UTC to the millisecond", len(got), got[len(got)-1].Body)
	}
	testkit.Eventually(t, 15*time.Second, "c cooling down", func() bool {
		answers["status"] = b.call(t, "GET", "/v1/subscribers/c/status", nil)
		return answers["status"].json(t)["cooling_until"] != nil
	})
	answers["dead letter"] = b.call(t, "GET", "/v1/dead-letters?subscriber=s&include_replayed=true", nil)
	answers["delivery"] = b.call(t, "GET", "/v1/subscribers/s/deliveries/e1", nil)
	answers["delivery log"] = b.call(t, "GET", "/v1/subscribers/s/deliveries", nil)
	answers["event"] = b.call(t, "GET", "/v1/events/e1", nil)
	b.call(t, "POST", "/v1/subscribers/s/secrets/rotate", map[string]string{"grace": "1h"})
	answers["paused subscriber"] = b.call(t, "POST", "/v1/subscribers/s/pause", nil)

	for name, r := range answers {
		if r.status/100 != 2 {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
		var v any
		json.Unmarshal(r.body, &v)
		n := 0
		answerTimes(v, "", func(path, s string) {
			n++
			if !utcMillis.MatchString(s) {
				t.Errorf("%s: %s is %s; want RFC 3339 in UTC to the millisecond", name, path, s)
			}
		})
		if n == 0 && name != "publish" { // a target enqueued at once has no process_at
			t.Errorf("%s: no time in the answer: %s", name, r.body)
		}
	}
}
