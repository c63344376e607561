package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	op := b.put(t, tasks.Subscriber{ID: "ops", URL: ops.URL, EventTypes: []string{tasks.OperatorDisabled, tasks.OperatorRecovered}})
	f := newFlaky(t)
	f.down.Store(true)
	b.put(t, tasks.Subscriber{ID: "crm", URL: f.URL, EventTypes: []string{"t"}})
	for i := range 10 {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 30*time.Second, "hooklane.subscriber.disabled", func() bool {
		for _, e := range operatorEvents(t, ops, op.Secrets[0]) {
			if e.Type == tasks.OperatorDisabled {
				return true
			}
		}
		return false
	})
	got, err := b.p.GetSubscriber(context.Background(), "crm")
	if err != nil || !got.Paused || got.PauseReason != tasks.PauseFailing {
		t.Fatalf("disabled subscriber %+v, %v; want paused, reason failing", got, err)
	}
	var d worker.FailingEvent
	var disabledData json.RawMessage
	for _, e := range operatorEvents(t, ops, op.Secrets[0]) {
		if e.Type == tasks.OperatorDisabled {
			disabledData = e.Data
		}
	}
	if err := json.Unmarshal(disabledData, &d); err != nil || d.SubscriberID != "crm" ||
		d.Reason != tasks.PauseFailing || d.At.Sub(d.FailingSince) < 2*time.Second {
		t.Fatalf("disabled data %+v, %v; want crm, reason failing, disabled at least 2s after it began failing", d, err)
	}
	// Held, not dropped: resumed with the endpoint back, every event is
	// delivered and none was dead-lettered meanwhile.
	f.down.Store(false)
	if err := b.p.SetPaused(context.Background(), "crm", false); err != nil {
		t.Fatal(err)
	}
	// (Before the fix: the probe that failed as the subscriber was disabled
	// kept the probe role for its lease, 21s, so nothing went after the
	// resume.)
	testkit.Eventually(t, 20*time.Second, "the 10 held events delivered after the resume", func() bool { return len(f.delivered()) == 10 })
	if n := len(b.dead(t, producer.DeadLetterQuery{Subscriber: "crm"})); n != 0 {
		t.Fatalf("%d dead letters; want the events held by the pause", n)
	}
	// Reported once: the breaker's close after the resume is reported
	// after the disable, so by the time it arrives a second disabled
	// report would have too.
	testkit.Eventually(t, 20*time.Second, "hooklane.subscriber.recovered after the resume", func() bool {
		for _, e := range operatorEvents(t, ops, op.Secrets[0]) {
			if e.Type == tasks.OperatorRecovered {
				return true
			}
		}
		return false
	})
	disabled := 0
	for _, e := range operatorEvents(t, ops, op.Secrets[0]) {
		if e.Type == tasks.OperatorDisabled {
			disabled++
		}
	}
	if disabled != 1 {
		t.Fatalf("disabled reported %d times; want once", disabled)
	}
}

// A dead-letter report claimed by a worker that dies before publishing it
// is not lost: its claim is a lease (the report stays in the due set, a
// lease ahead), and after the lease the next claim publishes it, once.
func TestDeadLetterReportSurvivesADeathAfterItsClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := testkit.Namespace("report")
	keys := tasks.Keys(ns)
	// The worker dies where it first stores the event of a delivery.dead
	// report (its id begins so): its connection drops, the command unsent.
	proxy := newFaultProxy(t, redisSrv.Addr)
	// No retries: go-redis may send a command again after its connection
	// dropped, depending on how it was batched with what else was under way
	// (deploy.AutoPipeline), and then the publish went through after all
	// (one run in two of a five-run loop): the failed publish must stay
	// failed, as the worker's death would leave it.
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(proxy.URL(), "redis://"), "/0"), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	idPrefix := strings.TrimPrefix(tasks.OperatorDead, tasks.OperatorPrefix) + "-"
	proxy.failOnce([]byte(strings.TrimSuffix(keys.Event(idPrefix), "}:e")))
	b := setupOn(t, rdb, ns, worker.Config{DeadReportEvery: 200 * time.Millisecond})
	ops := testkit.NewSink(t, nil)
	op := b.put(t, tasks.Subscriber{ID: "ops", URL: ops.URL, EventTypes: []string{tasks.OperatorDead}})
	down := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b.put(t, tasks.Subscriber{ID: "crm", URL: down.URL, EventTypes: []string{"t"}, MaxAttempts: 1})
	b.publish(t, "e1", "t")
	b.ledgerEntry(t, "crm:e1")
	var claim float64
	testkit.Eventually(t, 10*time.Second, "the report claimed and its publish failed", func() bool {
		z, err := rdb.ZScore(ctx, keys.DeadReportsDue(), "crm").Result()
		claim = z
		return err == nil && proxy.failures() == 1 && time.UnixMilli(int64(z)).After(time.Now().Add(10*time.Second))
	})
	if ops.Count() != 0 {
		t.Fatalf("%d reports arrived from a publish that failed", ops.Count())
	}
	// The lease lapses (moved back instead of waited out).
	if err := rdb.ZAddXX(ctx, keys.DeadReportsDue(), redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: "crm"}).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the report published after the lease", func() bool { return ops.Count() >= 1 })
	testkit.Eventually(t, 10*time.Second, "the claim ended", func() bool {
		return rdb.ZScore(ctx, keys.DeadReportsDue(), "crm").Err() == redis.Nil
	})
	evs := operatorEvents(t, ops, op.Secrets[0])
	if len(evs) != 1 {
		t.Fatalf("%d delivery.dead events (claim was at %v); want 1", len(evs), time.UnixMilli(int64(claim)))
	}
	var d worker.DeadEvent
	if err := json.Unmarshal(evs[0].Data, &d); err != nil || d.Count != 1 || len(d.Sample) != 1 || d.Sample[0].EventID != "e1" {
		t.Fatalf("report %s (%v); want one dead letter, e1", evs[0].Data, err)
	}
}
