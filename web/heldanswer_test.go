package web_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// A publish and a replay say when what they booked is held, and why (the
// answers checked against the contract): a replay into a paused
// subscriber is held, not "sent again" — neither in the API's answer nor
// on the console's page, nor a resend on the delivery's; an open breaker
// holds a publish's target.
func TestPublishAndReplaySayWhyTheyAreHeld(t *testing.T) {
	b := setup(t, fastRetries)
	down, err := deploy.NewRefusingPort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { down.Close() })
	b.call(t, "PUT", "/v1/subscribers/down", map[string]any{"url": "http://" + down.Addr + "/hook", "max_attempts": 1, "event_types": []string{"d"}})
	for _, id := range []string{"e1", "e2", "e3"} {
		if r := b.call(t, "POST", "/v1/events", `{"id":"`+id+`","type":"d","data":1}`); r.status != 202 {
			t.Fatalf("publish %s: %d %s", id, r.status, r.body)
		}
	}
	testkit.Eventually(t, 15*time.Second, "three dead letters", func() bool {
		r := b.call(t, "GET", "/v1/dead-letters?subscriber=down", nil)
		l, _ := r.json(t)["dead_letters"].([]any)
		return len(l) == 3
	})
	if r := b.call(t, "POST", "/v1/subscribers/down/pause", nil); r.status != 200 {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r := b.call(t, "POST", "/v1/dead-letters/replay", map[string]any{"ids": []string{"down:e1"}})
	var out struct{ Outcomes []producer.ReplayOutcome }
	if err := json.Unmarshal(r.body, &out); err != nil || r.status != 200 || len(out.Outcomes) != 1 ||
		out.Outcomes[0].Outcome != producer.Held || out.Outcomes[0].HeldReason != producer.HeldPaused {
		t.Fatalf("replay into a paused subscriber: %d %s; want held, held_reason paused", r.status, r.body)
	}
	// A resend from the console says it is held, not sent.
	page := b.consolePost(t, "/console/subscribers/down/deliveries/e3", "/console/subscribers/down/deliveries/e3/resend", nil)
	if loc := page.header.Get("Location"); page.status != 303 || !strings.HasSuffix(loc, "?done=resent-held-paused") {
		t.Fatalf("the console's resend into a paused subscriber: %d, to %q; want 303 to the page saying it is held", page.status, loc)
	}
	if page = b.consoleGet(t, "/console/subscribers/down/deliveries/e3?done=resent-held-paused"); !strings.Contains(page.body, "but held: the subscriber is paused") {
		t.Fatalf("the delivery page after the resend:\n%s\nwant it to say the resend is held", page.body)
	}
	page = b.consolePost(t, "/console/subscribers/down", "/console/subscribers/down/replay", nil)
	if page.status != 200 || !strings.Contains(page.body, ">held</span> (paused)") || strings.Contains(page.body, "was sent again") {
		t.Fatalf("the console's replay page: %d\n%s\nwant down:e2 held (paused), nothing said sent again", page.status, page.body)
	}

	b.call(t, "PUT", "/v1/subscribers/open", map[string]any{"url": "http://127.0.0.1:9/hook", "event_types": []string{"o"}})
	// The breaker as the worker's Commit opens it (limits/commit.go).
	now := time.Now().UnixMilli()
	if err := b.rdb.HSet(t.Context(), tasks.Keys(b.ns).Gates("open").Record, "b_open", now, "b_gap", 60000,
		"b_next", strconv.FormatInt(now+60000, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	r = b.call(t, "POST", "/v1/events", `{"id":"o1","type":"o","data":1}`)
	var res producer.PublishResult
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 202 || len(res.Targets) != 1 ||
		res.Targets[0].Outcome != producer.Held || res.Targets[0].HeldReason != producer.HeldBreakerOpen {
		t.Fatalf("publish to an open breaker: %d %s; want 202, held, held_reason breaker_open", r.status, r.body)
	}
}
