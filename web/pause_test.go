package web_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
)

// A PUT without "paused" leaves the pause as it is, whoever set it: an
// operator's, and one hooklane set because the endpoint answered 410 Gone.
// Only an operator's resume (or a PUT with "paused": false) lifts it; the
// reason is kept and shown.
func TestPutKeepsThePauseAndItsReason(t *testing.T) {
	b := setup(t, fastRetries)
	gone := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusGone) })
	put := map[string]any{"url": gone.URL}
	if r := b.call(t, "PUT", "/v1/subscribers/s", put); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`)
	testkit.Eventually(t, 10*time.Second, "paused by the 410", func() bool {
		r := b.call(t, "GET", "/v1/subscribers/s", nil)
		return r.json(t)["paused"] == true
	})
	// The operator changes the URL, not the pause.
	put["url"] = gone.URL + "/v2"
	r := b.call(t, "PUT", "/v1/subscribers/s", put)
	if m := r.json(t); r.status != 200 || m["paused"] != true || m["pause_reason"] != "gone" || m["paused_at"] == nil {
		t.Fatalf("PUT without paused after a 410: %d %s; want still paused, reason gone", r.status, r.body)
	}
	if r := b.call(t, "GET", "/v1/subscribers/s/status", nil); r.json(t)["pause_reason"] != "gone" {
		t.Fatalf("status: %s; want the reason gone", r.body)
	}
	// An explicit resume lifts it; an explicit pause is the operator's.
	put["paused"] = false
	if r := b.call(t, "PUT", "/v1/subscribers/s", put); r.json(t)["paused"] != false {
		t.Fatalf("PUT paused=false: %s", r.body)
	}
	put["paused"] = true
	if r := b.call(t, "PUT", "/v1/subscribers/s", put); r.json(t)["paused"] != true || r.json(t)["pause_reason"] != "operator" {
		t.Fatalf("PUT paused=true: %s; want paused by the operator", r.body)
	}
	delete(put, "paused")
	if r := b.call(t, "PUT", "/v1/subscribers/s", put); r.json(t)["paused"] != true {
		t.Fatalf("PUT without paused after the operator paused: %s", r.body)
	}
	if r := b.call(t, "POST", "/v1/subscribers/s/resume", nil); r.json(t)["paused"] != false || r.json(t)["pause_reason"] != nil {
		t.Fatalf("resume: %s", r.body)
	}
}
