package web_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// targets decodes a publish answer's outcomes by subscriber.
func targets(t *testing.T, r response) map[string]string {
	t.Helper()
	var res producer.PublishResult
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatalf("publish answer %d: %s", r.status, r.body)
	}
	out := map[string]string{}
	for _, tg := range res.Targets {
		out[tg.SubscriberID] = string(tg.Outcome)
	}
	return out
}

func TestPublishIsIdempotentAndBodyMatchesSDK(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL})
	b.call(t, "PUT", "/v1/subscribers/other", map[string]any{"url": s.URL, "event_types": []string{"billing.*"}})

	ev := `{"id":"evt_1","type":"video.trending","timestamp":"2026-07-11T08:14:02Z","data":{"video_id":"vv_9f31c2"}}`
	r := b.call(t, "POST", "/v1/events", ev)
	if got := targets(t, r); r.status != http.StatusAccepted || len(got) != 1 || got["s"] != "enqueued" {
		t.Fatalf("first publish: %d %s", r.status, r.body)
	}
	r = b.call(t, "POST", "/v1/events", ev)
	if got := targets(t, r); r.status != http.StatusOK || got["s"] != "duplicate" {
		t.Fatalf("same body again: %d %s; want 200 with a duplicate", r.status, r.body)
	}
	// The same id with another type is another event: refused, naming
	// the id, and nothing is sent (the contract checks the answer).
	r = b.call(t, "POST", "/v1/events", `{"id":"evt_1","type":"video.removed","data":{"video_id":"vv_9f31c2"}}`)
	if r.status != http.StatusConflict || !bytes.Contains(r.body, []byte(`"event_conflict"`)) {
		t.Fatalf("same id, another type: %d %s; want 409 event_conflict", r.status, r.body)
	}
	// The same event from the SDK, to compare what the receiver gets.
	var sdk tasks.Event
	json.Unmarshal([]byte(ev), &sdk)
	sdk.ID = "evt_2"
	if _, err := b.p.Publish(t.Context(), sdk, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "two deliveries", func() bool { return len(s.Got()) >= 2 })
	testkit.Eventually(t, 10*time.Second, "the queue to settle", func() bool {
		q, err := testkit.QueueInfo(b.insp, b.ns)
		return err == nil && q.Pending+q.Active+q.Scheduled+q.Retry == 0
	})
	got := s.Got()
	if len(got) != 2 {
		t.Fatalf("%d deliveries, want 2: one per event id, nothing twice", len(got))
	}
	bodies := map[string]string{}
	for _, a := range got {
		bodies[a.Header.Get("webhook-id")] = string(a.Body)
	}
	if bodies["evt_1"] != ev {
		t.Fatalf("API body %s\nwant %s", bodies["evt_1"], ev)
	}
	var keys1, keys2 map[string]json.RawMessage
	json.Unmarshal([]byte(bodies["evt_1"]), &keys1)
	json.Unmarshal([]byte(bodies["evt_2"]), &keys2)
	if want := []string{"data", "id", "timestamp", "type"}; !slices.Equal(sortedKeys(keys1), want) || !slices.Equal(sortedKeys(keys2), want) {
		t.Fatalf("body keys API %v, SDK %v; want %v", sortedKeys(keys1), sortedKeys(keys2), want)
	}

	// Without a timestamp, the API stamps the publish time like the SDK.
	r = b.call(t, "POST", "/v1/events", `{"id":"evt_3","type":"video.x","data":null,"subscriber_id":"other"}`)
	if got := targets(t, r); r.status != 202 || got["other"] != "enqueued" {
		t.Fatalf("send to one subscriber: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 10*time.Second, "evt_3", func() bool { return len(s.Got()) == 3 })
	var third tasks.Event
	json.Unmarshal(s.Got()[2].Body, &third)
	if time.Since(third.Timestamp) > time.Minute || string(third.Data) != "null" {
		t.Fatalf("evt_3 body %s", s.Got()[2].Body)
	}
}

func sortedKeys(m map[string]json.RawMessage) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestNotBeforeSchedules(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "http://127.0.0.1:9/x"})
	nb := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := b.call(t, "POST", "/v1/events", `{"id":"e","type":"t","data":1,"not_before":"`+nb+`"}`)
	var res producer.PublishResult
	json.Unmarshal(r.body, &res)
	if r.status != 202 || len(res.Targets) != 1 || res.Targets[0].ProcessAt.Format(time.RFC3339) != nb {
		t.Fatalf("publish with not_before: %d %s", r.status, r.body)
	}
}

func TestDeadLettersAndReplay(t *testing.T) {
	b := setup(t, fastRetries)
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL, "max_attempts": 2})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":{"n":1}}`)
	b.call(t, "POST", "/v1/events", `{"id":"e2","type":"t","data":{"n":2}}`)

	var list struct {
		DeadLetters []tasks.DeadLetter `json:"dead_letters"`
	}
	testkit.Eventually(t, 15*time.Second, "two dead letters", func() bool {
		r := b.call(t, "GET", "/v1/dead-letters?subscriber=s", nil)
		json.Unmarshal(r.body, &list)
		return r.status == 200 && len(list.DeadLetters) == 2
	})
	if d := list.DeadLetters[0]; d.Reason != "attempts" || len(d.Attempts) != 2 || d.Attempts[0].Status != 500 {
		t.Fatalf("dead letter %+v", d)
	}
	if r := b.call(t, "GET", "/v1/dead-letters?subscriber=other", nil); r.status != 200 || len(r.json(t)["dead_letters"].([]any)) != 0 {
		t.Fatalf("other subscriber's dead letters: %d %s", r.status, r.body)
	}

	healthy.Store(true)
	r := b.call(t, "POST", "/v1/dead-letters/replay", map[string]any{"ids": []string{"s:e1"}})
	var out struct{ Outcomes []producer.ReplayOutcome }
	json.Unmarshal(r.body, &out)
	if r.status != 200 || len(out.Outcomes) != 1 || out.Outcomes[0].TaskID != "s:e1" || out.Outcomes[0].Outcome != producer.Enqueued {
		t.Fatalf("replay by id: %d %s", r.status, r.body)
	}
	r = b.call(t, "POST", "/v1/dead-letters/replay", map[string]any{"subscriber": "s"})
	json.Unmarshal(r.body, &out)
	if r.status != 200 || len(out.Outcomes) != 1 || out.Outcomes[0].TaskID != "s:e2" {
		t.Fatalf("replay by subscriber: %d %s", r.status, r.body)
	}
	// 2 failed attempts for each event, then one delivery each, with the same id.
	testkit.Eventually(t, 10*time.Second, "redeliveries", func() bool { return len(s.Got()) == 6 })
	ids := []string{}
	for _, a := range s.Got()[4:] {
		ids = append(ids, a.Header.Get("webhook-id"))
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"e1", "e2"}) {
		t.Fatalf("replayed webhook-ids %v, want the same event ids", ids)
	}
	if r := b.call(t, "GET", "/v1/dead-letters?subscriber=s", nil); len(r.json(t)["dead_letters"].([]any)) != 0 {
		t.Fatalf("replayed entries still listed: %s", r.body)
	}
	if r := b.call(t, "GET", "/v1/dead-letters?subscriber=s&include_replayed=true", nil); len(r.json(t)["dead_letters"].([]any)) != 2 {
		t.Fatalf("include_replayed: %s", r.body)
	}
	if r := b.call(t, "DELETE", "/v1/dead-letters/s:e1", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete dead letter: %d %s", r.status, r.body)
	}
}

func TestStatus(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n > 0 { // the first request is delivered, then the endpoint throttles
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL, "max_in_flight": 3,
		"rate_limit": map[string]any{"rate": 50, "burst": 50, "period": "1s"}})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`)
	testkit.Eventually(t, 10*time.Second, "first delivery", func() bool { return len(s.Got()) == 1 })
	b.call(t, "POST", "/v1/events", `{"id":"e2","type":"t","data":1}`)
	b.call(t, "POST", "/v1/events", `{"id":"e3","type":"t","data":1}`)

	var st struct {
		CoolingUntil *time.Time     `json:"cooling_until"`
		InFlight     int64          `json:"in_flight"`
		MaxInFlight  int            `json:"max_in_flight"`
		RateLimit    map[string]any `json:"rate_limit"`
		Counts       map[string]int64
	}
	testkit.Eventually(t, 10*time.Second, "both events waiting on Retry-After", func() bool {
		r := b.call(t, "GET", "/v1/subscribers/s/status", nil)
		json.Unmarshal(r.body, &st)
		// Counters reach Redis within the worker's flush interval. Both wait
		// on the cooldown: cooling.
		return r.status == 200 && st.Counts["cooling"] == 2 && st.Counts["scheduled"]+st.Counts["retrying"] == 0 &&
			st.Counts["delivered"] == 1 && st.Counts["deferred"] >= 1
	})
	if st.CoolingUntil == nil || time.Until(*st.CoolingUntil) < 20*time.Second || st.Counts["delivered"] != 1 ||
		st.Counts["deferred"] < 1 || st.MaxInFlight != 3 || st.RateLimit["rate"] != 50.0 || st.InFlight != 0 {
		t.Fatalf("status %+v", st)
	}
}

func TestReplayByTimeRange(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL, "max_attempts": 1})
	var list struct {
		DeadLetters []tasks.DeadLetter `json:"dead_letters"`
	}
	dead := func(n int) func() bool {
		return func() bool {
			json.Unmarshal(b.call(t, "GET", "/v1/dead-letters", nil).body, &list)
			return len(list.DeadLetters) == n
		}
	}
	b.call(t, "POST", "/v1/events", `{"id":"early","type":"t","data":1}`)
	testkit.Eventually(t, 10*time.Second, "first dead letter", dead(1))
	cut := list.DeadLetters[0].DeadAt.Add(time.Millisecond)
	for time.Now().Before(cut.Add(5 * time.Millisecond)) { // the ledger keeps milliseconds
		time.Sleep(time.Millisecond)
	}
	b.call(t, "POST", "/v1/events", `{"id":"late","type":"t","data":1}`)
	testkit.Eventually(t, 10*time.Second, "second dead letter", dead(2))

	r := b.call(t, "POST", "/v1/dead-letters/replay", map[string]any{"since": cut.Format(time.RFC3339Nano)})
	var res struct {
		Outcomes []producer.ReplayOutcome `json:"outcomes"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 || len(res.Outcomes) != 1 || res.Outcomes[0].TaskID != "s:late" {
		t.Fatalf("replay since %v: %d %s", cut, r.status, r.body)
	}
	r = b.call(t, "POST", "/v1/dead-letters/replay", map[string]any{"until": cut.Format(time.RFC3339Nano)})
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 || len(res.Outcomes) != 1 || res.Outcomes[0].TaskID != "s:early" {
		t.Fatalf("replay until %v: %d %s", cut, r.status, r.body)
	}
	r = b.call(t, "POST", "/v1/dead-letters/replay", map[string]any{"since": cut.Format(time.RFC3339Nano), "until": cut.Add(-time.Hour).Format(time.RFC3339Nano)})
	if code, field := r.errorOf(t); r.status != 422 || code != "invalid" || field != "until" {
		t.Fatalf("inverted range: %d %s", r.status, r.body)
	}
}

// An event published through the API reaches its receiver as the bytes
// the API received (whitespace, `<&>`, U+2028, non-ASCII), and the API's
// answers show it the same: JSON, not HTML-escaped.
func TestPublishedBytesArriveAndShowAsSent(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL, "event_types": []string{"t"}})
	// A type nobody subscribes to: 200, and the answer says nothing is sent.
	if r := b.call(t, "POST", "/v1/events", `{"id":"evt_none","type":"nobody","data":1}`); r.status != http.StatusOK ||
		!bytes.Contains(r.body, []byte(`"note": "no subscriber matches type \"nobody\"`)) {
		t.Fatalf("publish of an unmatched type: %d %s; want 200 with a note", r.status, r.body)
	}
	data := "{ \"a\" : \"<&>\",\n  \"u\": \"\u2028 é \\u00e9\" }"
	ev := `{"id":"evt_bytes","type":"t","data":` + data + `}`
	if r := b.call(t, "POST", "/v1/events", ev); r.status != http.StatusAccepted {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 10*time.Second, "the delivery", func() bool { return s.Count() == 1 })
	if got := string(s.Got()[0].Body); !strings.Contains(got, `"data":`+data+`}`) {
		t.Fatalf("receiver got %q; want the data as published, %q", got, data)
	}
	r := b.call(t, "GET", "/v1/events/evt_bytes", nil)
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"<&>"`)) || bytes.Contains(r.body, []byte(`\u003c`)) {
		t.Fatalf("GET /v1/events/evt_bytes: %d %s; want <&> as itself", r.status, r.body)
	}
}
