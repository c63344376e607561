package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// delivery decodes a GET …/deliveries/{event_id} answer.
func (b *bundle) delivery(t *testing.T, sub, ev string) (tasks.DeliveryRecord, int) {
	t.Helper()
	r := b.call(t, "GET", "/v1/subscribers/"+sub+"/deliveries/"+ev, nil)
	var d tasks.DeliveryRecord
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &d); err != nil {
			t.Fatalf("delivery answer: %s", r.body)
		}
	}
	return d, r.status
}

func (b *bundle) waitState(t *testing.T, sub, ev, state string) tasks.DeliveryRecord {
	t.Helper()
	var d tasks.DeliveryRecord
	testkit.Eventually(t, 15*time.Second, fmt.Sprintf("%s's delivery to %s %s", ev, sub, state), func() bool {
		d, _ = b.delivery(t, sub, ev)
		return d.State == state
	})
	return d
}

// The operator's question: did endpoint X get event Y, and what did it
// answer? Each attempt's status, body and next try, without asynqmon.
func TestDeliveryLogSaysWhatTheEndpointAnswered(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("upstream down"))
			return
		}
		w.Write([]byte("ok"))
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL})
	ev := `{"id":"evt_1","type":"video.trending","data":{"video_id":"v9"}}`
	if r := b.call(t, "POST", "/v1/events", ev); r.status != http.StatusAccepted {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	d := b.waitState(t, "s", "evt_1", tasks.StateDelivered)
	if d.AttemptCount != 2 || len(d.Attempts) != 2 || d.EventType != "video.trending" || d.DeliveredAt.IsZero() || d.PublishedAt.IsZero() {
		t.Fatalf("delivery %+v; want delivered on the second of two attempts", d)
	}
	first, second := d.Attempts[0], d.Attempts[1]
	if first.Status != 500 || first.Body != "upstream down" || first.NextAt.IsZero() || first.NextAt.Before(first.At) {
		t.Errorf("first attempt %+v; want the 500 with its body and its next try", first)
	}
	if second.Status != 200 || second.Body != "ok" || !second.NextAt.IsZero() || second.At.Before(first.NextAt.Add(-time.Second)) {
		t.Errorf("second attempt %+v; want the 200, no next try", second)
	}

	// The event, stored once, with each subscriber's delivery.
	r := b.call(t, "GET", "/v1/events/evt_1", nil)
	var e struct {
		Event      tasks.Event            `json:"event"`
		Deliveries []tasks.DeliveryRecord `json:"deliveries"`
	}
	var data bytes.Buffer
	if err := json.Unmarshal(r.body, &e); err != nil || r.status != http.StatusOK || json.Compact(&data, e.Event.Data) != nil || data.String() != `{"video_id":"v9"}` ||
		len(e.Deliveries) != 1 || e.Deliveries[0].State != tasks.StateDelivered || e.Deliveries[0].Attempts != nil {
		t.Fatalf("GET /v1/events/evt_1: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ path, code string }{
		{"/v1/events/nope", "unknown_event"},
		{"/v1/subscribers/s/deliveries/nope", "unknown_delivery"},
		{"/v1/subscribers/nobody/deliveries", "unknown_subscriber"},
	} {
		r := b.call(t, "GET", c.path, nil)
		if code, _ := r.errorOf(t); r.status != http.StatusNotFound || code != c.code {
			t.Errorf("GET %s: %d %s; want 404 %s", c.path, r.status, r.body, c.code)
		}
	}
}

// The list pages newest first with a cursor, filters by state and time,
// and refuses a state that does not exist.
func TestDeliveryListPagesAndFilters(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL})
	b.call(t, "PUT", "/v1/subscribers/p", map[string]any{"url": s.URL, "paused": true})
	const n = 7
	for i := range n {
		b.call(t, "POST", "/v1/events", fmt.Sprintf(`{"id":"e%d","type":"t","data":null}`, i))
	}
	for i := range n {
		b.waitState(t, "s", fmt.Sprintf("e%d", i), tasks.StateDelivered)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("the cursor never ends")
		}
		r := b.call(t, "GET", "/v1/subscribers/s/deliveries?limit=3&cursor="+cursor, nil)
		var page web.DeliveryPage
		if err := json.Unmarshal(r.body, &page); err != nil || r.status != http.StatusOK {
			t.Fatalf("page: %d %s", r.status, r.body)
		}
		for _, d := range page.Deliveries {
			got = append(got, d.EventID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if fmt.Sprint(got) != "[e6 e5 e4 e3 e2 e1 e0]" {
		t.Fatalf("pages gave %v; want every delivery once, newest first", got)
	}
	// The paused subscriber's are held; a state filter finds them, and
	// none delivered.
	for state, want := range map[string]int{tasks.StateHeld: n, tasks.StateDelivered: 0} {
		r := b.call(t, "GET", "/v1/subscribers/p/deliveries?limit=100&state="+state, nil)
		var page web.DeliveryPage
		if err := json.Unmarshal(r.body, &page); err != nil || len(page.Deliveries) != want {
			t.Errorf("state=%s: %d %s; want %d", state, r.status, r.body, want)
		}
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := b.call(t, "GET", "/v1/subscribers/s/deliveries?since="+future, nil)
	if page := r.json(t); r.status != http.StatusOK || len(page["deliveries"].([]any)) != 0 {
		t.Errorf("since an hour from now: %d %s; want none", r.status, r.body)
	}
	for _, q := range []string{"state=lost", "limit=0", "since=yesterday", "cursor=%21%21"} {
		r := b.callRaw(t, "GET", "/v1/subscribers/s/deliveries?"+q, nil, bearer) // not a request the contract allows
		if code, _ := r.errorOf(t); r.status != http.StatusUnprocessableEntity || code != "invalid" {
			t.Errorf("?%s: %d %s; want 422 invalid", q, r.status, r.body)
		}
	}
}

// A resend sends the event again with the same webhook-id, as a new series
// of attempts in the same record; a dead one is replayed. It is refused
// while the delivery is under way, and once the payload has expired.
func TestResendSendsTheSameEventAgain(t *testing.T) {
	b := setup(t, fastRetries)
	s := testkit.NewSink(t, nil)
	bad := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL, "event_types": []string{"a"}})
	b.call(t, "PUT", "/v1/subscribers/d", map[string]any{"url": bad.URL, "event_types": []string{"a"}, "max_attempts": 1})
	b.call(t, "PUT", "/v1/subscribers/p", map[string]any{"url": s.URL, "event_types": []string{"b"}, "paused": true})
	b.call(t, "POST", "/v1/events", `{"id":"evt_1","type":"a","data":{"n":1}}`)
	b.call(t, "POST", "/v1/events", `{"id":"evt_2","type":"b","data":{"n":2}}`)
	b.waitState(t, "s", "evt_1", tasks.StateDelivered)
	b.waitState(t, "d", "evt_1", tasks.StateDead)

	for _, sub := range []string{"s", "d"} {
		r := b.call(t, "POST", "/v1/subscribers/"+sub+"/deliveries/evt_1/resend", nil)
		if got := targets(t, r); r.status != http.StatusAccepted || got[sub] != "enqueued" {
			t.Fatalf("resend to %s: %d %s; want 202 enqueued", sub, r.status, r.body)
		}
	}
	testkit.Eventually(t, 15*time.Second, "both resent", func() bool { return s.Count() == 2 && bad.Count() == 2 })
	for _, sink := range []*testkit.Sink{s, bad} {
		a := sink.Got()
		if a[0].ID != "evt_1" || a[1].ID != "evt_1" || string(a[1].Body) != string(a[0].Body) {
			t.Errorf("sent %q then %q (%s, %s); want the same webhook-id and body twice", a[0].ID, a[1].ID, a[0].Body, a[1].Body)
		}
	}
	for _, sub := range []string{"s", "d"} {
		d := b.waitState(t, sub, "evt_1", tasks.StateDelivered)
		if d.AttemptCount != 2 || d.Resends != 1 || len(d.Attempts) != 2 {
			t.Errorf("%s's record after the resend: %+v; want 2 attempts, 1 resend", sub, d)
		}
	}
	// Dead, its ledger entry deleted: its archived task is freed for the
	// resend. Scheduled with its task gone (an enqueue that failed after
	// the booking): sent again too.
	bad2 := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	b.call(t, "PUT", "/v1/subscribers/d2", map[string]any{"url": bad2.URL, "event_types": []string{"c"}, "max_attempts": 1})
	b.call(t, "PUT", "/v1/subscribers/g", map[string]any{"url": s.URL, "event_types": []string{"later"}})
	b.call(t, "POST", "/v1/events", `{"id":"evt_3","type":"c","data":{"n":3}}`)
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	b.call(t, "POST", "/v1/events", `{"id":"evt_4","type":"later","data":{"n":4},"not_before":"`+later+`"}`)
	b.waitState(t, "d2", "evt_3", tasks.StateDead)
	if r := b.call(t, "DELETE", "/v1/dead-letters/d2:evt_3", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete the dead letter: %d %s", r.status, r.body)
	}
	if r := b.call(t, "POST", "/v1/subscribers/g/deliveries/evt_4/resend", nil); r.status != http.StatusConflict {
		t.Fatalf("resend of a scheduled delivery: %d %s; want 409", r.status, r.body)
	}
	for sub, ev := range map[string]string{"d2": "evt_3"} {
		r := b.call(t, "POST", "/v1/subscribers/"+sub+"/deliveries/"+ev+"/resend", nil)
		if got := targets(t, r); r.status != http.StatusAccepted || got[sub] != "enqueued" {
			t.Fatalf("resend to %s: %d %s; want 202 enqueued", sub, r.status, r.body)
		}
		b.waitState(t, sub, ev, tasks.StateDelivered)
	}
	if n := bad2.Count(); n != 2 {
		t.Errorf("%d requests to d2; want the dead one and its resend", n)
	}
	// Held (paused): still under way.
	r := b.call(t, "POST", "/v1/subscribers/p/deliveries/evt_2/resend", nil)
	if code, _ := r.errorOf(t); r.status != http.StatusConflict || code != "delivery_active" {
		t.Errorf("resend of a held delivery: %d %s; want 409 delivery_active", r.status, r.body)
	}
	// Past the payload retention (its expiry is the producer's test):
	// nothing left to send, nothing sent.
	if err := b.rdb.Del(t.Context(), tasks.Keys(b.ns).Event("evt_1")).Err(); err != nil {
		t.Fatal(err)
	}
	if r := b.call(t, "GET", "/v1/events/evt_1", nil); r.status != http.StatusNotFound {
		t.Fatalf("GET the expired event: %d %s", r.status, r.body)
	}
	r = b.call(t, "POST", "/v1/subscribers/s/deliveries/evt_1/resend", nil)
	if code, _ := r.errorOf(t); r.status != http.StatusGone || code != "payload_expired" {
		t.Errorf("resend past the payload retention: %d %s; want 410 payload_expired", r.status, r.body)
	}
	if n := s.Count(); n != 2 {
		t.Errorf("%d requests to s; want 2 (evt_1 twice; evt_4 is not due for an hour)", n)
	}
}
