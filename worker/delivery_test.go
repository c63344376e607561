package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// TestPublishAgainDuringTheDeliveryIsADuplicate: an event published
// again while its first publish's deliveries run and end is reported a
// duplicate for every subscriber, however each delivery's end falls
// between the second publish's booking and its look for the task. 40
// subscribers, so that the later ones' deliveries end while the second
// publish still works through the earlier ones.
func TestPublishAgainDuringTheDeliveryIsADuplicate(t *testing.T) {
	t.Parallel()
	const subs, events = 40, 5
	b := setup(t, worker.Config{})
	var sinks []*testkit.Sink
	for i := range subs {
		s := testkit.NewSink(t, nil)
		sinks = append(sinks, s)
		b.put(t, tasks.Subscriber{ID: fmt.Sprintf("s%02d", i), URL: s.URL})
	}
	for e := range events {
		id := fmt.Sprintf("evt_%d", e)
		for i, want := range []producer.Outcome{producer.Enqueued, producer.Duplicate} {
			for _, tg := range b.publish(t, id, "t").Targets {
				if tg.Outcome != want {
					t.Errorf("%s, publish %d: %s is %s, want %s", id, i+1, tg.SubscriberID, tg.Outcome, want)
				}
			}
		}
	}
	testkit.Eventually(t, 20*time.Second, "every delivery made", func() bool {
		for _, s := range sinks {
			if s.Count() < events {
				return false
			}
		}
		return true
	})
	testkit.Eventually(t, 10*time.Second, "queue settled", func() bool { return b.settled(t) })
	for i, s := range sinks {
		if n := s.Count(); n != events {
			t.Errorf("s%02d received %d requests, want %d", i, n, events)
		}
	}
}

func TestPublishTwiceDeliversOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})

	if r := b.publish(t, "evt_1", "video.trending"); r.Targets[0].Outcome != producer.Enqueued {
		t.Fatalf("first publish: %s", r.Targets[0].Outcome)
	}
	if r := b.publish(t, "evt_1", "video.trending"); r.Targets[0].Outcome != producer.Duplicate {
		t.Fatalf("second publish: %s", r.Targets[0].Outcome)
	}
	testkit.Eventually(t, 10*time.Second, "the delivery recorded", func() bool {
		d, err := b.p.GetDelivery(context.Background(), "s", "evt_1")
		return err == nil && d.State == tasks.StateDelivered
	})
	// asynq keeps nothing of a delivered task; inside the dedup window its
	// delivery record makes a re-publish a duplicate.
	if _, err := testkit.Task(b.insp, b.ns, tasks.TaskID("s", "evt_1")); err == nil {
		t.Errorf("asynq still holds the delivered task")
	}
	if r := b.publish(t, "evt_1", "video.trending"); r.Targets[0].Outcome != producer.Duplicate {
		t.Fatalf("publish after delivery: %s", r.Targets[0].Outcome)
	}
	testkit.Eventually(t, 5*time.Second, "queue settled", func() bool { return b.settled(t) })
	if n := s.Count(); n != 1 {
		t.Fatalf("sink received %d requests, want exactly 1", n)
	}
	d, err := b.p.GetDelivery(context.Background(), "s", "evt_1")
	if err != nil || d.AttemptCount != 1 || len(d.Attempts) != 1 || d.Attempts[0].Status != 200 || d.DeliveredAt.IsZero() ||
		d.EventType != "video.trending" || d.PublishedAt.IsZero() {
		t.Fatalf("delivery record %+v, %v; want delivered after one attempt answered 200", d, err)
	}
	// Ended: no queue, no next attempt, no booking's wake-up, and it lives
	// for the dedup window.
	key := tasks.Keys(b.ns).Delivery("s", "evt_1")
	h := b.rdb.HGetAll(context.Background(), key).Val()
	for _, f := range []string{"q", "nx", "w"} {
		if _, ok := h[f]; ok {
			t.Errorf("the delivered record keeps field %s: %v", f, h)
		}
	}
	if ttl := b.rdb.PTTL(context.Background(), key).Val(); h["s"] != tasks.StateDelivered || ttl <= 0 {
		t.Errorf("the delivered record: state %q, ttl %v; want delivered, expiring", h["s"], ttl)
	}
}

// TestRateLimitHolds: 200 events to a subscriber limited to 40/s, burst
// 5: no window holds more than burst + rate·t.
//
// Not parallel, and not in TestLimitWindows: beside the other two window
// tests' start-up its burst's second request once arrived more than 50ms
// late ("20 arrivals in 372.978185ms (from #1), the limit allows 19.9",
// one run of five, -count=5 on 2026-12-03), which shortens every window
// that starts there; alone it held in every run before.
func TestRateLimitHolds(t *testing.T) {
	runtime.GC() // start from a small heap, not the garbage of the heavy test before
	const n, rate, burst = 200, 40, 5
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, Limit: limits.Limit{Rate: rate, Burst: burst, Period: time.Second}})
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	testkit.Eventually(t, 30*time.Second, "200 deliveries", func() bool { return s.Count() >= n })
	a := s.Got()
	if len(a) != n {
		t.Fatalf("%d deliveries, want %d", len(a), n)
	}
	// 50ms: the slack the load harness allows between the limiter's
	// decision and the arrival under -race on two cores.
	withinLimit(t, a, rate, burst, 50*time.Millisecond)
	steady := float64(n-burst-1) / a[n-1].At.Sub(a[burst].At).Seconds()
	if steady < rate*0.95 || steady > rate*1.05 {
		t.Fatalf("steady rate %.2f/s, want within 5%% of %d/s", steady, rate)
	}
	t.Logf("steady rate %.2f/s; %d handler runs for %d deliveries", steady, b.w.Stats().Runs.Load(), n)
	// The sink sees a request before the worker records its outcome.
	testkit.Eventually(t, 5*time.Second, "outcomes recorded", func() bool { return b.counter(t, "s", "delivered") == n })
	st, err := worker.ReadStats(context.Background(), b.rdb, b.ns, "s")
	var hist int64
	for _, le := range worker.LatencyBuckets {
		hist += st[fmt.Sprintf("e2e:%g", le)]
	}
	if err != nil || st["delivered"] != n || hist+st["e2e:+Inf"] != n {
		t.Fatalf("counters %v, %v; want %d delivered, all in the e2e histogram", st, err, n)
	}
	// Due when published: each latency written once, in the "el" fields
	// (read in both histograms and as delivered), not in four, and not
	// counted delivered apart.
	raw := b.rdb.HGetAll(context.Background(), tasks.Keys(b.ns).Stats("s")).Val()
	for f := range raw {
		if strings.HasPrefix(f, "e2e") || strings.HasPrefix(f, "late") || f == "delivered" {
			t.Fatalf("stats hold %s for deliveries due when published: %v", f, raw)
		}
	}
	if st["late_sum_ms"] != st["e2e_sum_ms"] || raw["el_sum_ms"] == "" {
		t.Fatalf("stats %v (raw %v): want the late histogram the e2e one, from the el fields", st, raw)
	}
}

func testRetryAfter(t *testing.T, header func(received time.Time) (value string, deadline time.Time)) {
	b := setup(t, worker.Config{})
	var deadline time.Time // written by the first request, read after the sixth
	s := testkit.NewSink(t, func(w http.ResponseWriter, n int) {
		if n == 0 {
			var v string
			v, deadline = header(time.Now())
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	// One slot: the other events are queued behind the one that earns the
	// 429, which is exactly the case seed 000 got wrong.
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxInFlight: 1})
	const n = 5
	for i := range n {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 20*time.Second, "all events after the 429", func() bool { return s.Count() >= n+1 })
	a := s.Got()
	for i, r := range a[1:] {
		if r.At.Before(deadline) {
			t.Fatalf("request %d arrived %v before the Retry-After deadline", i+1, deadline.Sub(r.At))
		}
	}
	first := a[0].Header.Get("webhook-id")
	retried := 0
	for _, r := range a[1:] {
		if r.Header.Get("webhook-id") == first {
			retried++
		}
	}
	if len(a) != n+1 || retried != 1 {
		t.Fatalf("%d requests, %d retries of the throttled event; want %d and 1", len(a), retried, n+1)
	}
	// The worker counts a delivery after the endpoint answered: wait for it.
	var st map[string]int64
	testkit.Eventually(t, 5*time.Second, "delivery counters", func() bool {
		st, _ = worker.ReadStats(context.Background(), b.rdb, b.ns, "s")
		return st["delivered"] >= n
	})
	if st["deferred:retry_after"] != 1 || st["delivered"] != n {
		t.Fatalf("counters %v: want one retry_after deferral and %d delivered", st, n)
	}
	var d tasks.DeliveryRecord
	testkit.Eventually(t, 5*time.Second, "the throttled event's record", func() bool {
		var err error
		d, err = b.p.GetDelivery(context.Background(), "s", first)
		return err == nil && d.State == tasks.StateDelivered
	})
	if len(d.Attempts) != 2 || d.Attempts[0].Status != 429 || d.Attempts[1].AttemptsSpent != 0 {
		t.Fatalf("throttled event's attempts %+v; want the 429, then the delivery with no attempt spent", d.Attempts)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	t.Parallel()
	testRetryAfter(t, func(now time.Time) (string, time.Time) { return "3", now.Add(3 * time.Second) })
}

func TestRetryAfterHTTPDate(t *testing.T) {
	t.Parallel()
	testRetryAfter(t, func(now time.Time) (string, time.Time) {
		d := now.Add(3 * time.Second).UTC().Truncate(time.Second)
		return d.Format(http.TimeFormat), d
	})
}

// A slow endpoint holds its in-flight slots and a few waiters, not the
// worker: a fast subscriber's events, published at the same moment, all
// arrive before the slow one has answered its first request, and sooner
// than the in-handler wait (MaxWait) they would spend queued behind it.
func TestSlowSubscriberDoesNotDelayFast(t *testing.T) {
	t.Parallel()
	// A small pool, so a slow endpoint that hogged it would show.
	b := setup(t, worker.Config{Concurrency: 8, MaxWait: time.Second})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := testkit.NewSink(t, func(http.ResponseWriter, int) {
		select {
		case <-release:
		case <-time.After(3 * time.Second):
		}
	})
	fast := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "slow", URL: slow.URL, MaxInFlight: 2})
	b.put(t, tasks.Subscriber{ID: "fast", URL: fast.URL, Limit: limits.PerSecond(100)})
	const n = 20
	for i := range n {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 10*time.Second, "fast deliveries", func() bool { return fast.Count() >= n })
	testkit.Eventually(t, 10*time.Second, "the slow endpoint's slots taken", func() bool { return slow.Count() >= 2 })
	first := slow.Got()[0].At

	if last := fast.Got()[n-1].At; last.After(first.Add(time.Second)) {
		t.Fatalf("the fast subscriber's last delivery came %v after the slow one's first request; want all within the 1s MaxWait (the slow endpoint answers after 3s)",
			last.Sub(first))
	}
	if got := slow.Count(); got > 2 {
		t.Fatalf("the slow subscriber got %d requests at once with max in-flight 2", got)
	}
}

// A task that finds its destination's in-flight slots taken waits in the
// process at most MaxWait, then is parked again (it does not wait for the
// slow answer, due after 3s). Two slots, three events handed out (two in
// flight and one to wait, as the slots carry until the endpoint's latency
// is known).
func TestBusyWaitEndsAtMaxWait(t *testing.T) {
	t.Parallel()
	const maxWait = 500 * time.Millisecond
	b := setup(t, worker.Config{MaxWait: maxWait})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := testkit.NewSink(t, func(http.ResponseWriter, int) {
		select {
		case <-release:
		case <-time.After(3 * time.Second):
		}
	})
	b.put(t, tasks.Subscriber{ID: "slow", URL: slow.URL, MaxInFlight: 2})
	b.publish(t, "e0", "t")
	b.publish(t, "e1", "t")
	b.publish(t, "e2", "t")
	testkit.Eventually(t, 10*time.Second, "the slots taken", func() bool { return slow.Count() == 2 })
	first := slow.Got()[0].At
	// MaxWait, plus the 200ms the counters take to be flushed, plus slack.
	testkit.Eventually(t, time.Until(first.Add(maxWait+700*time.Millisecond)), "the other task deferred after MaxWait",
		func() bool { return b.counter(t, "slow", "deferred:"+worker.DeferredInFlight) == 1 })
	if n := slow.Count(); n != 2 {
		t.Fatalf("%d requests with two in-flight slots held", n)
	}
}

func TestAlways500IsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 3})
	b.publish(t, "e1", "t")
	id := tasks.TaskID("s", "e1")
	var info *asynq.TaskInfo
	testkit.Eventually(t, 20*time.Second, "archived", func() bool {
		var err error
		info, err = testkit.Task(b.insp, b.ns, id)
		return err == nil && info.State == asynq.TaskStateArchived
	})
	if want := "attempt 3 of 3: HTTP 500 Internal Server Error"; !strings.Contains(info.LastErr, want) {
		t.Fatalf("archived error %q, want it to contain %q", info.LastErr, want)
	}
	if n := s.Count(); n != 3 {
		t.Fatalf("sink saw %d attempts, want 3", n)
	}
	testkit.Eventually(t, 5*time.Second, "failures recorded", func() bool { return b.counter(t, "s", "failed") == 2 })
	st, err := worker.ReadStats(context.Background(), b.rdb, b.ns, "s")
	if err != nil || st["failed"] != 2 || st["dead:attempts"] != 1 || st["delivered"] != 0 {
		t.Fatalf("counters %v, %v; want failed 2, dead:attempts 1", st, err)
	}
	ids := map[string]bool{}
	for _, a := range s.Got() {
		ids[a.Header.Get("webhook-id")] = true
	}
	if len(ids) != 1 || !ids["e1"] {
		t.Fatalf("webhook-id across attempts: %v, want only e1", ids)
	}
	e := b.ledgerEntry(t, id)
	if e.Reason != worker.DeadAttempts || len(e.Attempts) != 3 || e.Attempts[2].Status != 500 || e.Event == nil || e.Event.ID != "e1" {
		t.Fatalf("ledger entry %+v; want reason attempts with the 3 attempts and the event", e)
	}
}

func TestGoneDeadLettersAndPauses(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusGone) })
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
	b.publish(t, "e1", "t")
	testkit.Eventually(t, 10*time.Second, "archived", func() bool {
		info, err := testkit.Task(b.insp, b.ns, tasks.TaskID("s", "e1"))
		return err == nil && info.State == asynq.TaskStateArchived && strings.Contains(info.LastErr, "HTTP 410 Gone")
	})
	sub, err := b.p.GetSubscriber(context.Background(), "s")
	if err != nil || !sub.Paused || sub.PauseReason != tasks.PauseGone {
		t.Fatalf("subscriber after 410: paused=%v reason %q, %v; want paused, reason gone", sub.Paused, sub.PauseReason, err)
	}
	if ok, err := b.rdb.SIsMember(context.Background(), tasks.Keys(b.ns).PausedIndex(), "s").Result(); err != nil || !ok {
		t.Fatalf("subscriber paused by a 410 not in the paused index (metrics' count): %v, %v", ok, err)
	}
	if e := b.ledgerEntry(t, "s:e1"); e.Reason != worker.DeadGone || len(e.Attempts) != 1 || e.Attempts[0].Status != 410 {
		t.Fatalf("ledger entry %+v; want reason gone with the 410", e)
	}
	if n := s.Count(); n != 1 {
		t.Fatalf("sink saw %d requests, want 1", n)
	}
	// Paused: a new event is held for it, not sent (and not dropped).
	if r := b.publish(t, "e2", "t"); len(r.Targets) != 1 || r.Targets[0].Outcome != producer.Held {
		t.Fatalf("paused subscriber got %v; want e2 held", r.Targets)
	}
	if d, err := b.p.GetDelivery(context.Background(), "s", "e2"); err != nil || d.State != tasks.StateHeld {
		t.Fatalf("e2's delivery %+v, %v; want held", d, err)
	}
	if b.settled(t) {
		t.Fatal("nothing left to run: e2 was dropped, not held")
	}
	if n := s.Count(); n != 1 {
		t.Fatalf("sink saw %d requests after the pause, want still 1", n)
	}
}

func TestSignaturesAndBody(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	sec2, _ := tasks.NewSecret()
	sub := b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
	sub.Secrets = append(sub.Secrets, sec2)
	b.put(t, sub)
	ts := time.Date(2026, 7, 11, 8, 14, 2, 0, time.UTC)
	_, err := b.p.Publish(context.Background(), tasks.Event{ID: "evt_01JMZ8K3", Type: "video.trending", Timestamp: ts,
		Data: json.RawMessage(`{"video_id":"vv_9f31c2","region":"NL"}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "delivery", func() bool { return s.Count() == 1 })
	a := s.Got()[0]
	if sigs := strings.Fields(a.Header.Get("webhook-signature")); len(sigs) != 2 {
		t.Fatalf("webhook-signature %q: want two signatures", a.Header.Get("webhook-signature"))
	}
	for _, sec := range sub.Secrets {
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(a.Body, a.Header); err != nil {
			t.Fatalf("signature for secret %d does not verify: %v", len(sec), err)
		}
	}
	other, _ := tasks.NewSecret()
	wh, _ := standardwebhooks.NewWebhook(other)
	if wh.Verify(a.Body, a.Header) == nil {
		t.Fatal("an unrelated secret verifies")
	}
	want := `{"id":"evt_01JMZ8K3","type":"video.trending","timestamp":"2026-07-11T08:14:02Z","data":{"video_id":"vv_9f31c2","region":"NL"}}`
	if string(a.Body) != want {
		t.Fatalf("body %s\nwant %s", a.Body, want)
	}
	if a.Header.Get("webhook-id") != "evt_01JMZ8K3" || !strings.HasPrefix(a.Header.Get("User-Agent"), "hooklane/") ||
		a.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", a.Header)
	}
}

func TestNotBeforeIsHonoured(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
	nb := time.Now().Add(1500 * time.Millisecond)
	_, err := b.p.Publish(context.Background(), tasks.Event{ID: "e", Type: "t", Data: json.RawMessage(`1`)},
		&producer.PublishOpts{NotBefore: nb})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "delivery", func() bool { return s.Count() == 1 })
	if at := s.Got()[0].At; at.Before(nb) {
		t.Fatalf("delivered %v before not-before", nb.Sub(at))
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	target := testkit.NewSink(t, nil)
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		w.Header().Set("Location", target.URL)
		w.WriteHeader(http.StatusFound)
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 1})
	b.publish(t, "e", "t")
	testkit.Eventually(t, 10*time.Second, "archived", func() bool {
		info, err := testkit.Task(b.insp, b.ns, tasks.TaskID("s", "e"))
		return err == nil && info.State == asynq.TaskStateArchived && strings.Contains(info.LastErr, "HTTP 302")
	})
	if target.Count() != 0 {
		t.Fatal("redirect was followed")
	}
}

func TestUndecodablePayloadIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	b.put(t, tasks.Subscriber{ID: "s", URL: "http://127.0.0.1:9/x"})
	c := asynq.NewClientFromRedisClient(b.rdb)
	// One task hooklane could have written (its id names a subscriber), one
	// it could not have.
	q := tasks.Keys(b.ns).DeliveryQueue("", "s", tasks.LaneFresh, 1)
	for _, id := range []string{"s:bad", "bad"} {
		if _, err := c.Enqueue(asynq.NewTask(tasks.TypeDeliver, []byte("{not json"), asynq.Queue(q), asynq.TaskID(id))); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"s:bad", "bad"} {
		testkit.Eventually(t, 10*time.Second, "archived", func() bool {
			info, err := testkit.Task(b.insp, b.ns, id)
			return err == nil && info.State == asynq.TaskStateArchived && strings.Contains(info.LastErr, "undecodable payload")
		})
		if e := b.ledgerEntry(t, id); e.Reason != worker.DeadUndecodable || e.Payload != "{not json" || e.Event != nil {
			t.Fatalf("ledger entry of %s: %+v; want reason undecodable and the raw payload kept", id, e)
		}
	}
}

// Past its retry horizon an event is dead even with attempts left.
func TestRetryHorizonDeadLetters(t *testing.T) {
	t.Parallel()
	// An idle worker polls every PollInterval (500 ms by default): the
	// first attempt could start that late, its retry too, and the second
	// attempt fall past the horizon. 100 ms leaves the schedule below its
	// margin of half a second.
	b := setup(t, worker.Config{BackoffBase: 1500 * time.Millisecond, BackoffMax: 1500 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 8, RetryHorizon: tasks.Duration(2 * time.Second)})
	b.publish(t, "e1", "t")
	e := b.ledgerEntry(t, "s:e1")
	// Attempt 1, then 1.5s of backoff: attempt 2; the next would be 3s
	// after publishing, past the 2s horizon.
	if e.Reason != worker.DeadHorizon || len(e.Attempts) != 2 || !strings.Contains(e.Error, "retry horizon") {
		t.Fatalf("ledger entry %+v; want reason horizon after 2 attempts", e)
	}
	if n := s.Count(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// When the dead letter cannot be committed, the task is not archived: the
// run sends its commit again (idempotent: once written, written once),
// then answers asynq. One request, one dead letter.
func TestLedgerWriteFailureRetriesTheTask(t *testing.T) {
	t.Parallel()
	ns := testkit.Namespace("ledgerfail")
	proxy := newFaultProxy(t, redisSrv.Addr)
	// No retries inside the client: the failed command fails the write.
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(proxy.URL(), "redis://"), "/0"), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	w, stop := startWorker(t, rdb, ns, worker.Config{})
	defer stop()
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	if _, err := p.PutSubscriber(context.Background(), tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	proxy.failOnce(respKeys(tasks.Keys(ns).Ledger("s:e1").Entry)) // the commit's key list names it
	if _, err := p.Publish(context.Background(), tasks.Event{ID: "e1", Type: "t", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	testkit.Eventually(t, 20*time.Second, "archived after the commit was sent again", func() bool {
		info, err := testkit.Task(insp, ns, "s:e1")
		return err == nil && info.State == asynq.TaskStateArchived
	})
	if proxy.failures() != 1 {
		t.Fatalf("the ledger write failed %d times, want 1: the test did not test", proxy.failures())
	}
	dl, _, err := p.DeadLetters(context.Background(), producer.DeadLetterQuery{IDs: []string{"s:e1"}})
	if err != nil || len(dl) != 1 || dl[0].Reason != worker.DeadAttempts {
		t.Fatalf("ledger %+v, %v; want the entry, written by the retry", dl, err)
	}
	if n := s.Count(); n != 1 || w.Stats().Dead.Load() != 1 || w.Stats().CommitErrors.Load() != 1 {
		t.Fatalf("%d requests, %d dead runs, %d commit errors; want 1, 1, 1", n, w.Stats().Dead.Load(), w.Stats().CommitErrors.Load())
	}
}

// The SSRF guard, end to end: a sink on 127.0.0.1 that is not allowlisted
// is never reached, and the delivery is dead-lettered at once.
func TestSSRFGuardRefusesUnlistedLoopback(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
	b.publish(t, "e", "t")
	testkit.Eventually(t, 10*time.Second, "archived", func() bool {
		info, err := testkit.Task(b.insp, b.ns, tasks.TaskID("s", "e"))
		return err == nil && info.State == asynq.TaskStateArchived && strings.Contains(info.LastErr, "address not allowed")
	})
	if s.Count() != 0 {
		t.Fatal("the refused sink received a request")
	}
	if dl := b.dead(t, producer.DeadLetterQuery{}); len(dl) != 1 || dl[0].Reason != worker.DeadRefused {
		t.Fatalf("ledger %+v, want one entry with reason refused", dl)
	}
}

// The delivery record is written by its script's sha; a Redis that does not
// know the script (restarted, failed over, SCRIPT FLUSH) gets its text, and
// nothing is lost or written twice. Not parallel: the flush is the shared
// Redis's.
func TestDeliveryRecordSurvivesAScriptFlush(t *testing.T) {
	ctx := context.Background()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
	for i, id := range []string{"e1", "e2"} {
		if i > 0 {
			if err := b.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		b.publish(t, id, "t")
		testkit.Eventually(t, 10*time.Second, id+" recorded delivered", func() bool {
			d, err := b.p.GetDelivery(ctx, "s", id)
			return err == nil && d.State == tasks.StateDelivered && d.AttemptCount == 1
		})
	}
	if d, _ := b.p.GetDelivery(ctx, "s", "e2"); len(d.Attempts) != 1 {
		t.Fatalf("e2's attempts %+v; want one", d.Attempts)
	}
}
