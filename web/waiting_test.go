package web_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// A parked delivery says why it waits now, in the same word in its own
// answer, in its subscriber's delivery list (and its state filter) and in
// the status counts: held while the subscriber is paused or its breaker
// open, cooling while a cooldown runs that ends after it is due, scheduled
// again once that ends.
func TestParkedDeliveriesSayWhyTheyWaitEverywhere(t *testing.T) {
	b := setup(t, nil)
	ctx := t.Context()
	keys := tasks.Keys(b.ns)
	for _, c := range []struct {
		sub, want string
		hold      func(sub string)
	}{
		{"paused", "held", func(sub string) { b.call(t, "POST", "/v1/subscribers/"+sub+"/pause", nil) }},
		{"open", "held", func(sub string) {
			// The breaker as the worker's Commit opens it (limits/commit.go).
			now := time.Now().UnixMilli()
			if err := b.rdb.HSet(ctx, keys.Gates(sub).Record, "b_open", now, "b_gap", 60000, "b_next", strconv.FormatInt(now+60000, 10)).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"cool", "cooling", func(sub string) {
			// Past the delivery's due time, tomorrow: it waits for the cooldown.
			if _, _, err := limits.NewGates(b.rdb).Cooldown(ctx, keys.Gates(sub), limits.RetryAfter{After: 48 * time.Hour}, 72*time.Hour); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		b.call(t, "PUT", "/v1/subscribers/"+c.sub, map[string]any{"url": "http://127.0.0.1:9/hook", "event_types": []string{c.sub}})
		// Due tomorrow: parked, never tried: scheduled.
		b.call(t, "POST", "/v1/events", `{"id":"`+c.sub+`1","type":"`+c.sub+`","data":1,"not_before":"`+later()+`"}`)
		if got := b.shown(t, c.sub, "scheduled"); got != "scheduled scheduled ["+c.sub+"1] 1 1" {
			t.Fatalf("%s before: delivery, list, list of scheduled, count scheduled, count scheduled = %s; want scheduled everywhere", c.sub, got)
		}
		c.hold(c.sub)
		want := fmt.Sprintf("%[1]s %[1]s [%[2]s1] 0 1", c.want, c.sub)
		if got := b.shown(t, c.sub, c.want); got != want {
			t.Errorf("%s: delivery, list, list of %s, count scheduled, count %[2]s = %s; want %s", c.sub, c.want, got, want)
		}
	}
	// A cooldown that ends before the delivery is due does not hold it.
	b.call(t, "PUT", "/v1/subscribers/later", map[string]any{"url": "http://127.0.0.1:9/hook", "event_types": []string{"later"}})
	b.call(t, "POST", "/v1/events", `{"id":"later1","type":"later","data":1,"not_before":"`+later()+`"}`)
	if _, _, err := limits.NewGates(b.rdb).Cooldown(ctx, keys.Gates("later"), limits.RetryAfter{After: time.Hour}, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := b.shown(t, "later", "scheduled"); got != "scheduled scheduled [later1] 1 1" {
		t.Errorf("later, a cooldown of an hour: %s; want it scheduled everywhere, due tomorrow", got)
	}
	b.call(t, "POST", "/v1/subscribers/paused/resume", nil)
	if got := b.shown(t, "paused", "scheduled"); got != "scheduled scheduled [paused1] 1 1" {
		t.Errorf("paused, resumed: %s; want scheduled again everywhere", got)
	}
}

// shown is how sub's delivery of event <sub>1 is shown: its own state, its state in
// the list, the events the list filtered by state st returns, and the
// status' counts of scheduled and of st.
func (b *bundle) shown(t *testing.T, sub, st string) string {
	t.Helper()
	one := b.call(t, "GET", "/v1/subscribers/"+sub+"/deliveries/"+sub+"1", nil).json(t)["state"]
	var list struct{ Deliveries []tasks.DeliveryRecord }
	json.Unmarshal(b.call(t, "GET", "/v1/subscribers/"+sub+"/deliveries", nil).body, &list)
	var inList any
	if len(list.Deliveries) == 1 {
		inList = list.Deliveries[0].State
	}
	json.Unmarshal(b.call(t, "GET", "/v1/subscribers/"+sub+"/deliveries?state="+st, nil).body, &list)
	var filtered []string
	for _, d := range list.Deliveries {
		filtered = append(filtered, d.EventID)
	}
	var status struct{ Counts map[string]int64 }
	json.Unmarshal(b.call(t, "GET", "/v1/subscribers/"+sub+"/status", nil).body, &status)
	return fmt.Sprint(one, " ", inList, " ", filtered, " ", status.Counts["scheduled"], " ", status.Counts[st])
}
