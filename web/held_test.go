package web_test

import (
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
)

// An event published while its subscriber is paused is held (outcome
// "held"), waits without being sent, and is delivered once the subscriber
// is resumed; one published with skip_paused is reported "skipped" and
// never sent.
func TestPausedSubscribersEventsAreHeldUntilResumed(t *testing.T) {
	b := setup(t, fastRetries)
	sink := testkit.NewSink(t, nil)
	if r := b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": sink.URL, "paused": true}); r.status != 201 {
		t.Fatalf("create paused: %d %s", r.status, r.body)
	}
	outcome := func(r response) any {
		targets, _ := r.json(t)["targets"].([]any)
		if len(targets) != 1 {
			t.Fatalf("%d targets in %s; want one", len(targets), r.body)
		}
		return targets[0].(map[string]any)["outcome"]
	}
	if r := b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`); r.status != 202 || outcome(r) != "held" {
		t.Fatalf("publish while paused: %d %s; want 202 held", r.status, r.body)
	}
	if r := b.call(t, "POST", "/v1/events", `{"id":"e2","type":"t","data":2,"skip_paused":true}`); r.status != 200 || outcome(r) != "skipped" {
		t.Fatalf("publish with skip_paused: %d %s; want 200 skipped", r.status, r.body)
	}
	// It waits in the subscriber's schedule: its delivery says held, and
	// no worker runs it meanwhile.
	if r := b.call(t, "GET", "/v1/subscribers/s/deliveries/e1", nil); r.json(t)["state"] != "held" {
		t.Fatalf("the held event's delivery: %s; want held", r.body)
	}
	time.Sleep(500 * time.Millisecond) // time for a worker that would take it to take it: none may
	if n := b.w.Stats().Runs.Load(); n != 0 {
		t.Fatalf("%d handler runs while paused; want none", n)
	}
	if n := sink.Count(); n != 0 {
		t.Fatalf("%d requests while paused", n)
	}
	if r := b.call(t, "POST", "/v1/subscribers/s/resume", nil); r.status != 200 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 15*time.Second, "the held event delivered after the resume", func() bool { return sink.Count() == 1 })
	if r := b.call(t, "POST", "/v1/events", `{"id":"e3","type":"t","data":3}`); r.status != 202 || outcome(r) != "enqueued" {
		t.Fatalf("publish after the resume: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 10*time.Second, "e3", func() bool { return sink.Count() == 2 })
	if got := []string{sink.Got()[0].ID, sink.Got()[1].ID}; got[0] != "e1" || got[1] != "e3" {
		t.Fatalf("delivered %v; want e1 (held) then e3, never the skipped e2", got)
	}
}
