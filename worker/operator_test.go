package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// opEvent is an operator event as the operator endpoint received it.
type opEvent struct {
	ID   string
	Type string
	Data json.RawMessage
}

// operatorEvents returns the distinct operator events ops received (by
// webhook-id), failing t on a bad signature or a non-operator type.
func operatorEvents(t *testing.T, ops *testkit.Sink, secret string) []opEvent {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []opEvent
	for _, a := range ops.Got() {
		if err := wh.Verify(a.Body, a.Header); err != nil {
			t.Fatalf("operator event %s: signature does not verify: %v", a.ID, err)
		}
		var ev opEvent
		if err := json.Unmarshal(a.Body, &ev); err != nil || !tasks.IsOperatorType(ev.Type) {
			t.Fatalf("operator endpoint got %s (%v); want only hooklane.* events", a.Body, err)
		}
		if !seen[a.ID] {
			seen[a.ID] = true
			out = append(out, ev)
		}
	}
	return out
}

// TestOperatorEventsArriveSignedOnceEach: a destination that goes down and
// comes back is reported to the subscriber of hooklane.* events — failing
// once, recovered once, its dead letters in delivery.dead events whose
// counts add up to the ledger's — and nothing of it reaches an unfiltered
// subscriber.
func TestOperatorEventsArriveSignedOnceEach(t *testing.T) {
	t.Parallel()
	b := procBundle(t, "HOOKLANE_DEAD_REPORT_EVERY=1s", "HOOKLANE_BREAKER_FAILURES=3", // a real worker process
		"HOOKLANE_BREAKER_PROBE_GAP=200ms", "HOOKLANE_BREAKER_RAMP=1s")
	ops := testkit.NewSink(t, nil)
	op := b.put(t, tasks.Subscriber{ID: "ops", URL: ops.URL, EventTypes: []string{"hooklane.*"}})
	all := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "all", URL: all.URL, EventTypes: []string{"other"}})
	everything := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "everything", URL: everything.URL}) // no filter: every app event, no operator event
	f := newFlaky(t)
	f.down.Store(true)
	b.put(t, tasks.Subscriber{ID: "crm", URL: f.URL, EventTypes: []string{"t"}, MaxAttempts: 1})
	const n = 20
	for i := range n {
		b.publish(t, fmt.Sprintf("e%02d", i), "t")
	}
	testkit.Eventually(t, 20*time.Second, "failing and a delivery.dead", func() bool {
		var failing, dead bool
		for _, e := range operatorEvents(t, ops, op.Secrets[0]) {
			failing = failing || e.Type == tasks.OperatorFailing
			dead = dead || e.Type == tasks.OperatorDead
		}
		return failing && dead
	})
	f.down.Store(false)
	testkit.Eventually(t, 30*time.Second, "every event delivered or dead", func() bool {
		return len(f.delivered())+len(b.dead(t, producer.DeadLetterQuery{Subscriber: "crm", Limit: 100})) == n
	})
	deadLetters := len(b.dead(t, producer.DeadLetterQuery{Subscriber: "crm", Limit: 100}))
	var got map[string]int
	var reported int64
	testkit.Eventually(t, 20*time.Second, "recovered, and every dead letter reported", func() bool {
		got, reported = map[string]int{}, 0
		for _, e := range operatorEvents(t, ops, op.Secrets[0]) {
			got[e.Type]++
			if e.Type == tasks.OperatorDead {
				var d worker.DeadEvent
				if err := json.Unmarshal(e.Data, &d); err != nil || d.SubscriberID != "crm" || d.Count < 1 {
					t.Fatalf("delivery.dead data %s: %v", e.Data, err)
				}
				reported += d.Count
			}
		}
		return got[tasks.OperatorRecovered] == 1 && reported == int64(deadLetters)
	})
	if got[tasks.OperatorFailing] != 1 || got[tasks.OperatorRecovered] != 1 {
		t.Errorf("operator events %v; want failing and recovered once each", got)
	}
	for _, e := range operatorEvents(t, ops, op.Secrets[0]) {
		if e.Type == tasks.OperatorFailing {
			var d worker.FailingEvent
			if err := json.Unmarshal(e.Data, &d); err != nil || d.SubscriberID != "crm" || d.FailingSince.IsZero() ||
				!strings.Contains(d.LastError, "request failed") {
				t.Errorf("failing data %s: %v; want the subscriber, since when, and the last error", e.Data, err)
			}
		}
	}
	t.Logf("%d dead letters, reported in %d delivery.dead events", deadLetters, got[tasks.OperatorDead])
	if all.Count() != 0 {
		t.Errorf("a subscriber of other types got %d requests", all.Count())
	}
	for _, a := range everything.Got() {
		if strings.HasPrefix(a.ID, "subscriber.") || strings.HasPrefix(a.ID, "delivery.") {
			t.Errorf("an unfiltered subscriber got operator event %s", a.ID)
		}
	}
	if _, err := b.p.Publish(context.Background(), tasks.Event{ID: "x", Type: tasks.OperatorFailing, Data: json.RawMessage(`{}`)}, nil); err == nil {
		t.Error("an app published a hooklane.* event")
	}
}

// The operator endpoint's own failures never feed back: the dead letters
// of operator events are not reported in other operator events.
func TestOperatorEventsDoNotReportThemselves(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{DeadReportEvery: time.Second, Breaker: noBreaker})
	ops := newFlaky(t)
	ops.down.Store(true) // the operator endpoint is down too
	b.put(t, tasks.Subscriber{ID: "ops", URL: ops.URL, EventTypes: []string{"hooklane.*"}, MaxAttempts: 1})
	f := newFlaky(t)
	f.down.Store(true)
	b.put(t, tasks.Subscriber{ID: "crm", URL: f.URL, EventTypes: []string{"t"}, MaxAttempts: 1})
	for i := range 3 {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	// crm's dead letters are reported to ops, whose deliveries die too.
	testkit.Eventually(t, 20*time.Second, "an operator event dead-lettered", func() bool {
		return len(b.dead(t, producer.DeadLetterQuery{Subscriber: "ops", Limit: 10})) >= 1
	})
	testkit.Eventually(t, 10*time.Second, "crm's dead letters all reported", func() bool {
		n, _ := b.rdb.HGet(context.Background(), tasks.Keys(b.ns).DeadBatch("crm"), "n").Int()
		return n == 0
	})
	// Two report periods later, nothing reported ops' own dead letters.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n, _ := b.rdb.Exists(context.Background(), tasks.Keys(b.ns).DeadBatch("ops")).Result(); n != 0 {
			t.Fatal("the operator endpoint's dead letters were batched for a report")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, e := range b.dead(t, producer.DeadLetterQuery{Subscriber: "ops", Limit: 10}) {
		var d worker.DeadEvent
		if e.Event == nil || json.Unmarshal(e.Event.Data, &d) != nil || d.SubscriberID != "crm" {
			t.Errorf("ops' dead letter %+v: want only reports about crm", e.Event)
		}
	}
}

// TestFailingWithoutABreakDisablesAndSaysSo: past DisableAfter of failing
// without a break, the subscriber is paused with reason failing, its
// events are held (not dead-lettered), and hooklane.subscriber.disabled
// reaches the operator endpoint once.
func TestFailingWithoutABreakDisablesAndSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{Breaker: limits.BreakerPolicy{Failures: 3, ProbeGap: 200 * time.Millisecond,
		MaxProbeGap: 300 * time.Millisecond, DisableAfter: 2 * time.Second}})
	ops := testkit.NewSink(t, nil)
	op := b.put(t, tasks.Subscriber{ID: "ops", URL: ops.URL, EventTypes: []string{tasks.OperatorDisabled}})
	f := newFlaky(t)
	f.down.Store(true)
	b.put(t, tasks.Subscriber{ID: "crm", URL: f.URL, EventTypes: []string{"t"}})
	for i := range 10 {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 30*time.Second, "hooklane.subscriber.disabled", func() bool {
		return len(operatorEvents(t, ops, op.Secrets[0])) == 1
	})
	got, err := b.p.GetSubscriber(context.Background(), "crm")
	if err != nil || !got.Paused || got.PauseReason != tasks.PauseFailing {
		t.Fatalf("disabled subscriber %+v, %v; want paused, reason failing", got, err)
	}
	var d worker.FailingEvent
	if err := json.Unmarshal(operatorEvents(t, ops, op.Secrets[0])[0].Data, &d); err != nil || d.SubscriberID != "crm" ||
		d.Reason != tasks.PauseFailing || d.At.Sub(d.FailingSince) < 2*time.Second {
		t.Fatalf("disabled data %+v, %v; want crm, reason failing, disabled at least 2s after it began failing", d, err)
	}
	if n := len(b.dead(t, producer.DeadLetterQuery{Subscriber: "crm"})); n != 0 {
		t.Fatalf("%d dead letters; want the events held by the pause", n)
	}
	if len(operatorEvents(t, ops, op.Secrets[0])) != 1 {
		t.Fatal("disabled reported more than once")
	}
}
