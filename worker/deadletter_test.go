package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

func TestDeadLetterLedgerAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.Header().Set("Retry-After", "soon") // unusable: a counted failure
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 2})
	b.publish(t, "e1", "video.trending")
	var dl []tasks.DeadLetter
	testkit.Eventually(t, 10*time.Second, "ledger entry", func() bool {
		dl = b.dead(t, producer.DeadLetterQuery{Subscriber: "s"})
		return len(dl) == 1
	})
	e := dl[0]
	if e.TaskID != "s:e1" || e.Reason != worker.DeadAttempts || e.Event == nil || e.Event.Type != "video.trending" ||
		string(e.Event.Data) != `{"n":1}` || len(e.Attempts) != 2 || e.Attempts[0].Status != 503 || e.Attempts[1].RetryAfter != "soon" {
		t.Fatalf("ledger entry %+v", e)
	}
	healthy.Store(true)
	out, next, err := b.p.Replay(ctx, producer.DeadLetterQuery{Subscriber: "s"})
	if err != nil || len(out) != 1 || out[0].Outcome != producer.Enqueued || next != "" {
		t.Fatalf("Replay = %+v, %q, %v", out, next, err)
	}
	testkit.Eventually(t, 10*time.Second, "redelivery", func() bool { return s.Count() == 3 })
	if got := s.Got()[2].Header.Get("webhook-id"); got != "e1" {
		t.Fatalf("replayed webhook-id %q, want the same event id e1", got)
	}
	if dl := b.dead(t, producer.DeadLetterQuery{Subscriber: "s"}); len(dl) != 0 {
		t.Fatalf("replayed entry still listed as dead: %+v", dl)
	}
	dl = b.dead(t, producer.DeadLetterQuery{IDs: []string{"s:e1"}, IncludeReplayed: true})
	if len(dl) != 1 || dl[0].ReplayedAt.IsZero() || len(dl[0].Attempts) != 2 {
		t.Fatalf("replayed entry not marked, or its history lost: %+v", dl)
	}
	if out, next, err := b.p.Replay(ctx, producer.DeadLetterQuery{Subscriber: "s"}); err != nil || len(out) != 0 || next != "" {
		t.Fatalf("second replay did %+v, %q, %v; want nothing, and no error", out, next, err)
	}
	if err := b.p.DeleteDeadLetter(ctx, "s:e1"); err != nil {
		t.Fatal(err)
	}
	if err := b.p.DeleteDeadLetter(ctx, "s:e1"); !errors.Is(err, producer.ErrUnknownDeadLetter) {
		t.Fatalf("second delete: %v", err)
	}
}

// asynq trims its archive (10,000 tasks per queue, 90 days): the ledger
// keeps every dead letter without it, pages through them, and replays
// them all. The archive is emptied here as asynq's trim empties it (the
// archived set's entries and their task hashes), instead of overflowing
// it with 12,000 deliveries.
func TestLedgerOutlivesTheArchive(t *testing.T) {
	t.Parallel()
	const n = 60
	ctx := context.Background()
	b := setup(t, worker.Config{Breaker: noBreaker})
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 1, MaxInFlight: 50, Limit: limits.PerSecond(1_000_000)})
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	queues := []string{tasks.Keys(b.ns).DeliveryQueue("", "s", tasks.LaneFresh, 1), tasks.Keys(b.ns).DeliveryQueue("", "s", tasks.LaneBacklog, 1)}
	archived := func(q string) string { return "asynq:{" + q + "}:archived" } // asynq's own key
	// Each is committed dead before asynq archives it: wait for both.
	testkit.Eventually(t, 20*time.Second, "all dead and archived", func() bool {
		in := int64(0)
		for _, q := range queues {
			in += b.rdb.ZCard(ctx, archived(q)).Val()
		}
		return b.w.Stats().Dead.Load() == n && in == n
	})
	trimmed := 0
	for _, q := range queues {
		archived := archived(q)
		ids, err := b.rdb.ZRange(ctx, archived, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			b.rdb.Del(ctx, tasks.Keys(b.ns).AsynqTask(q, id))
		}
		b.rdb.Del(ctx, archived)
		trimmed += len(ids)
	}
	if trimmed != n {
		t.Fatalf("asynq's archive held %d of the %d dead letters; want all before its trim", trimmed, n)
	}
	dl, next, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{Limit: 50})
	if err != nil || len(dl) != 50 || next == "" {
		t.Fatalf("DeadLetters page: %d, next %q, %v; want 50 and a cursor to the rest", len(dl), next, err)
	}
	rest, next, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{Limit: 50, Cursor: next})
	if err != nil || len(rest) != n-50 || next != "" {
		t.Fatalf("DeadLetters second page: %d, next %q, %v; want the other %d", len(rest), next, err, n-50)
	}
	healthy.Store(true)
	out, err := b.p.ReplayAll(ctx, producer.DeadLetterQuery{Subscriber: "s"})
	if err != nil || len(out) != n {
		t.Fatalf("Replay: %d outcomes, %v; want %d", len(out), err, n)
	}
	for _, o := range out {
		if !o.Outcome.Booked() { // enqueued, or scheduled behind the subscriber's rate
			t.Fatalf("replay of %s: %s %s", o.TaskID, o.Outcome, o.Error)
		}
	}
	testkit.Eventually(t, 20*time.Second, "all redelivered", func() bool { return b.w.Stats().Delivered.Load() == n })
}

// Every key a dead letter owns lives as long as the entry: forever with no
// retention (deploy/GUARANTEES.md promises every attempt is kept: they are in the
// entry), the retention with one; the delivery record's own, shorter life
// takes nothing with it.
func TestDeadLetterKeysLiveAsLongAsTheEntry(t *testing.T) {
	t.Parallel()
	for _, retention := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprint("retention=", retention), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, worker.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, DeadLetterRetention: retention})
			s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
			b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 3})
			b.publish(t, "e1", "t")
			var dl []tasks.DeadLetter
			testkit.Eventually(t, 10*time.Second, "the dead letter", func() bool {
				dl = b.dead(t, producer.DeadLetterQuery{Subscriber: "s"})
				return len(dl) == 1
			})
			if len(dl[0].Attempts) != 3 {
				t.Fatalf("dead letter with %d attempts, want 3", len(dl[0].Attempts))
			}
			lk := tasks.Keys(b.ns).Ledger("s:e1")
			if n, err := b.rdb.Exists(ctx, lk.Attempts).Result(); err != nil || n != 0 {
				t.Errorf("an attempt list of the release before's form written: %d, %v", n, err)
			}
			for _, key := range []string{lk.Entry} {
				ttl, err := b.rdb.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case retention == 0 && ttl != -1:
					t.Errorf("%s: ttl %v, want none: a dead letter is kept until replayed or deleted", key, ttl)
				case retention > 0 && (ttl < retention-time.Minute || ttl > retention):
					t.Errorf("%s: ttl %v, want the %v retention", key, ttl, retention)
				}
			}
			for _, key := range []string{lk.Index, tasks.Keys(b.ns).AllDeadIndex()} {
				if ttl, err := b.rdb.PTTL(ctx, key).Result(); err != nil || ttl != -1 {
					t.Errorf("index %s: ttl %v (%v), want none: entries are trimmed one by one", key, ttl, err)
				}
				if _, err := b.rdb.ZScore(ctx, key, "s:e1").Result(); err != nil {
					t.Errorf("index %s does not list the entry: %v", key, err)
				}
			}
		})
	}
}

// Listing pages on with a cursor past entries the filters skip: with the
// newest 100 of 150 replayed, the other 50 are still found.
func TestDeadLetterPagesGoOnPastReplayed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{Breaker: noBreaker})
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 1, Limit: limits.PerSecond(10_000)})
	const n = 150
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	var all []tasks.DeadLetter
	ok := testkit.Poll(20*time.Second, func() bool {
		all = b.dead(t, producer.DeadLetterQuery{Limit: 1000})
		return len(all) == n
	})
	if !ok {
		q, err := testkit.QueueInfo(b.insp, b.ns)
		st, _ := worker.ReadStats(ctx, b.rdb, b.ns, "s")
		idx, _ := b.rdb.ZCard(ctx, tasks.Keys(b.ns).AllDeadIndex()).Result()
		t.Fatalf("%d dead letters listed, index %d; queue %+v %v; stats %v; worker %+v", len(all), idx, q, err, st, b.w.Stats())
	}
	var newest []string
	for _, e := range all[:100] {
		newest = append(newest, e.TaskID)
	}
	healthy.Store(true)
	out, next, err := b.p.Replay(ctx, producer.DeadLetterQuery{IDs: newest})
	if err != nil || len(out) != 100 || next != "" {
		t.Fatalf("replay of the newest 100: %d outcomes, next %q, %v", len(out), next, err)
	}
	var found []tasks.DeadLetter
	cursor, pages := "", 0
	for {
		page, next, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{Limit: 20, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		found = append(found, page...)
		if next == "" {
			break
		}
		if pages > 20 {
			t.Fatalf("still paging after %d pages", pages)
		}
		cursor = next
	}
	if len(found) != n-100 {
		t.Fatalf("paging past the replayed entries found %d, want the %d not replayed", len(found), n-100)
	}
	seen := map[string]bool{}
	for _, e := range found {
		if seen[e.TaskID] || !e.ReplayedAt.IsZero() {
			t.Fatalf("entry %s listed twice or replayed: %+v", e.TaskID, e)
		}
		seen[e.TaskID] = true
	}
}

// Replay works in batches: each call does at most Limit and answers a
// cursor; a replay cut off after its first batch is finished by the same
// request sent again, and each replayed task starts a fresh attempt list.
func TestReplayIsBatchedAndResumable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{Breaker: noBreaker})
	var healthy atomic.Bool
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 1, Limit: limits.PerSecond(10_000)})
	const n = 25
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	testkit.Eventually(t, 20*time.Second, "25 dead letters", func() bool { return len(b.dead(t, producer.DeadLetterQuery{Limit: 100})) == n })
	healthy.Store(true)
	q := producer.DeadLetterQuery{Subscriber: "s", Limit: 10}
	first, next, err := b.p.Replay(ctx, q)
	if err != nil || len(first) != 10 || next == "" {
		t.Fatalf("first batch: %d, next %q, %v; want 10 and a cursor", len(first), next, err)
	}
	// Cut off here. The same request again goes on with the rest.
	rest, err := b.p.ReplayAll(ctx, q)
	if err != nil || len(rest) != n-10 {
		t.Fatalf("the same replay again: %d outcomes, %v; want the other %d", len(rest), err, n-10)
	}
	for _, o := range append(first, rest...) {
		if !o.Outcome.Booked() { // enqueued, or scheduled behind the subscriber's rate
			t.Fatalf("%s: %s %s", o.TaskID, o.Outcome, o.Error)
		}
	}
	testkit.Eventually(t, 20*time.Second, "every replayed event delivered", func() bool { return b.w.Stats().Delivered.Load() == n })
	lk := tasks.Keys(b.ns).Ledger("s:e000")
	if n, err := b.rdb.LLen(ctx, lk.Attempts).Result(); err != nil || n != 0 {
		t.Fatalf("attempts of a replayed, delivered task: %d (%v); want a fresh list, emptied by the delivery", n, err)
	}
	dl := b.dead(t, producer.DeadLetterQuery{IDs: []string{"s:e000"}, IncludeReplayed: true})
	if len(dl) != 1 || len(dl[0].Attempts) != 1 || dl[0].ReplayedAt.IsZero() {
		t.Fatalf("replayed entry %+v; want it marked, its one earlier attempt kept in it", dl)
	}
}

// With a retention, the indexes are trimmed as entries expire.
func TestDeadLetterIndexTrimmedPastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{DeadLetterRetention: time.Second})
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL, MaxAttempts: 1})
	b.publish(t, "old", "t")
	keys := tasks.Keys(b.ns)
	testkit.Eventually(t, 10*time.Second, "the first dead letter indexed", func() bool {
		n, _ := b.rdb.ZCard(ctx, keys.DeadIndex("s")).Result()
		return n == 1
	})
	testkit.Eventually(t, 10*time.Second, "its entry expired", func() bool {
		n, _ := b.rdb.Exists(ctx, keys.Ledger("s:old").Entry).Result()
		return n == 0
	})
	b.publish(t, "new", "t")
	testkit.Eventually(t, 10*time.Second, "the expired one trimmed from both indexes", func() bool {
		a, _ := b.rdb.ZRange(ctx, keys.DeadIndex("s"), 0, -1).Result()
		g, _ := b.rdb.ZRange(ctx, keys.AllDeadIndex(), 0, -1).Result()
		return fmt.Sprint(a) == "[s:new]" && fmt.Sprint(g) == "[s:new]"
	})
}

// A task refers to its event, stored once: should that be gone when the
// task runs (deleted by hand, or an operator's too-short retention), the
// delivery is dead-lettered as undecodable, never sent without its data,
// and its replay is refused rather than sending an empty event.
func TestTaskWhoseStoredEventIsGoneIsDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	s := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
	if _, err := b.p.Publish(ctx, tasks.Event{ID: "e1", Type: "t", Data: []byte(`{"n":1}`)},
		&producer.PublishOpts{NotBefore: time.Now().Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.Del(ctx, tasks.Keys(b.ns).Event("e1")).Err(); err != nil {
		t.Fatal(err)
	}
	var dl []tasks.DeadLetter
	testkit.Eventually(t, 10*time.Second, "ledger entry", func() bool {
		dl = b.dead(t, producer.DeadLetterQuery{Subscriber: "s"})
		return len(dl) == 1
	})
	if e := dl[0]; e.Reason != worker.DeadUndecodable || !strings.Contains(e.Error, "gone") || e.Event != nil || e.Payload == "" {
		t.Fatalf("ledger entry %+v; want undecodable, the task's own payload kept, no event to replay", e)
	}
	out, _, _ := b.p.Replay(ctx, producer.DeadLetterQuery{Subscriber: "s"})
	if len(out) != 1 || out[0].Outcome != producer.Failed {
		t.Fatalf("replay: %+v; want it refused", out)
	}
	if d, err := b.p.GetDelivery(ctx, "s", "e1"); err != nil || d.State != tasks.StateDead {
		t.Fatalf("delivery record %+v, %v; want dead", d, err)
	}
	if n := s.Count(); n != 0 {
		t.Fatalf("%d requests; want none", n)
	}
}

// A breaker's probe that is never sent — its stored event turns out gone,
// or the SSRF guard refuses its address — gives the probe role back at
// once (it is dead-lettered, and the next task may probe now, not after
// the role's lease).
func TestUnsentProbeGivesTheRoleBack(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, reason string
		cfg          worker.Config
		unsend       func(b *bundle)
	}{
		{"stored event gone", worker.DeadUndecodable, worker.Config{}, func(b *bundle) {
			if err := b.rdb.Del(context.Background(), tasks.Keys(b.ns).Event("e1")).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"address refused", worker.DeadRefused, worker.Config{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, func(*bundle) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, c.cfg)
			s := testkit.NewSink(t, nil)
			b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
			gate := tasks.Keys(b.ns).Gate("s")
			// Open, with the next probe due now: the first task to come is the probe.
			if err := b.rdb.HSet(ctx, gate, "b_open", time.Now().UnixMilli(), "b_next", 0, "b_gap", 1000).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := b.p.Publish(ctx, tasks.Event{ID: "e1", Type: "t", Data: []byte(`1`)},
				&producer.PublishOpts{NotBefore: time.Now().Add(2 * time.Second)}); err != nil {
				t.Fatal(err)
			}
			c.unsend(b)
			var dl []tasks.DeadLetter
			testkit.Eventually(t, 10*time.Second, "the probe dead-lettered", func() bool {
				dl = b.dead(t, producer.DeadLetterQuery{Subscriber: "s"})
				return len(dl) == 1
			})
			if dl[0].Reason != c.reason {
				t.Fatalf("dead-lettered for %s; want %s", dl[0].Reason, c.reason)
			}
			if p := b.rdb.HGet(ctx, gate, "b_probe").Val(); p != "" {
				t.Fatalf("probe role still held until %s after its unsent probe", p)
			}
			if n := s.Count(); n != 0 {
				t.Fatalf("%d requests; want none", n)
			}
		})
	}
}
