package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// batchCase is one event of the batch below and what each single publish
// of it answers.
type batchCase struct {
	ev   producer.BatchEvent
	want string // the answer's kind: an error sentinel's text, or the targets' outcomes
}

// A batch answers each event exactly as a publish of it alone does, in
// order, in the same states: the same outcomes (held for a paused
// subscriber, skipped with SkipPaused, due later with NotBefore, a
// duplicate the second time) and the same refusals (invalid, an
// operator's type, too large, an id reused with other content, an unknown
// subscriber), each refused event writing nothing. Two namespaces with the
// same subscribers: one publishes event by event, the other in one batch,
// twice.
func TestPublishBatchAnswersEachEventAsPublishDoes(t *testing.T) {
	batch, ctx := setup(t), context.Background()
	single := &bundle{ns: testkit.Namespace("p")}
	var err error
	if single.p, err = producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: single.ns}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { single.p.Close() })
	for _, b := range []*bundle{single, batch} {
		serve(t, b.ns)
		b.put(t, tasks.Subscriber{ID: "all", URL: "https://a.test", EventTypes: []string{"video.*", "billing.*"}})
		b.put(t, tasks.Subscriber{ID: "videos", URL: "https://b.test", EventTypes: []string{"video.*"}})
		b.put(t, tasks.Subscriber{ID: "paused", URL: "https://d.test", EventTypes: []string{"video.*"}, Paused: true})
		// Stored before: the batch's e-conflict reuses its id with other data.
		if _, err := b.p.Publish(ctx, event("e-conflict", "video.trending"), nil); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour)
	big := json.RawMessage(`"` + strings.Repeat("x", tasks.MaxDataSize) + `"`)
	cases := []batchCase{
		{producer.BatchEvent{Event: event("e1", "video.trending")}, "all=enqueued paused=held videos=enqueued"},
		{producer.BatchEvent{Event: event("", "video.trending")}, "invalid"},
		{producer.BatchEvent{Event: event("e-op", "hooklane.ping")}, "invalid"},
		{producer.BatchEvent{Event: tasks.Event{ID: "e-big", Type: "video.trending", Data: big}}, producer.ErrPayloadTooLarge.Error()},
		{producer.BatchEvent{Event: tasks.Event{ID: "e-conflict", Type: "video.trending", Data: json.RawMessage(`{"other":1}`)}}, producer.ErrEventConflict.Error()},
		{producer.BatchEvent{Event: event("e1", "video.trending")}, "all=duplicate paused=duplicate videos=duplicate"},
		{producer.BatchEvent{Event: tasks.Event{ID: "e1", Type: "video.trending", Data: json.RawMessage(`2`)}}, producer.ErrEventConflict.Error()},
		{producer.BatchEvent{Event: event("e-skip", "video.trending"), Opts: &producer.PublishOpts{SkipPaused: true}}, "all=enqueued paused=skipped videos=enqueued"},
		{producer.BatchEvent{Event: event("e-later", "video.trending"), Opts: &producer.PublishOpts{NotBefore: later}}, "all=scheduled@later paused=held@later videos=scheduled@later"},
		{producer.BatchEvent{Event: event("e-to", "billing.paid"), To: "videos"}, "videos=enqueued"},
		{producer.BatchEvent{Event: event("e-nobody", "billing.paid"), To: "nobody"}, producer.ErrUnknownSubscriber.Error()},
		{producer.BatchEvent{Event: event("e-billing", "billing.paid")}, "all=enqueued"},
		{producer.BatchEvent{Event: event("e-none", "other")}, "none"},
	}
	evs := make([]producer.BatchEvent, len(cases))
	for i, c := range cases {
		evs[i] = c.ev
	}
	for round := range 2 {
		got, err := batch.p.PublishEach(ctx, evs)
		if err != nil || len(got) != len(cases) {
			t.Fatalf("round %d: PublishEach: %d answers, %v; want %d", round, len(got), err, len(cases))
		}
		for i, c := range cases {
			var res *producer.PublishResult
			var err error
			if c.ev.To != "" {
				res, err = single.p.SendTo(ctx, c.ev.To, c.ev.Event, c.ev.Opts)
			} else {
				res, err = single.p.Publish(ctx, c.ev.Event, c.ev.Opts)
			}
			one, many := answer(res, err, later), answer(got[i].Result, got[i].Err, later)
			if one != many {
				t.Errorf("round %d, event %d (%s): batch %q, alone %q", round, i, c.ev.Event.ID, many, one)
			}
			want := c.want
			if round == 1 { // booked the first time: a duplicate now
				want = strings.NewReplacer("=enqueued", "=duplicate", "=scheduled", "=duplicate", "=held", "=duplicate").Replace(want)
			}
			if many != want {
				t.Errorf("round %d, event %d (%s): %q; want %q", round, i, c.ev.Event.ID, many, want)
			}
		}
	}
	// The refused events wrote nothing: no stored event, no delivery.
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	for _, id := range []string{"e-big", "e-op", "e-nobody"} {
		if n := rdb.Exists(ctx, tasks.Keys(batch.ns).Event(id)).Val(); n != 0 {
			t.Errorf("refused event %s was stored", id)
		}
		if _, err := batch.p.GetDelivery(ctx, "all", id); !errors.Is(err, producer.ErrUnknownDelivery) {
			t.Errorf("refused event %s: delivery to all: %v; want none", id, err)
		}
	}
	se, err := batch.p.StoredEvent(ctx, "e-conflict")
	if err != nil || string(se.Event.Data) != `{"video_id":"vv_9f31c2"}` {
		t.Errorf("e-conflict: %+v, %v; want the first event kept", se.Event, err)
	}
	if _, err := batch.p.PublishBatch(ctx, make([]tasks.Event, producer.MaxBatch+1), nil); !errors.Is(err, producer.ErrInvalid) ||
		!strings.Contains(err.Error(), "events") {
		t.Errorf("a batch of %d: %v; want it refused whole, naming events", producer.MaxBatch+1, err)
	}
}

// answer names what a publish answered: the targets' outcomes (@later
// when due at the given time), "none" when no subscriber matched, else
// its error's kind.
func answer(res *producer.PublishResult, err error, later time.Time) string {
	if err != nil {
		for _, e := range []error{producer.ErrInvalid, producer.ErrPayloadTooLarge, producer.ErrEventConflict, producer.ErrUnknownSubscriber, producer.ErrRedisUnavailable} {
			if errors.Is(err, e) {
				return e.Error()
			}
		}
		return "other: " + err.Error()
	}
	if len(res.Targets) == 0 && res.Note != "" {
		return "none"
	}
	var parts []string
	for _, tg := range res.Targets {
		s := tg.SubscriberID + "=" + string(tg.Outcome)
		if !tg.ProcessAt.IsZero() && tg.ProcessAt.After(later.Add(-time.Minute)) {
			s += "@later"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// roundTrips counts the round trips a client makes: each command sent
// alone, and each pipeline.
type roundTrips struct {
	alone, pipelines atomic.Int64
	mu               sync.Mutex
	names            map[string]int
}

func (r *roundTrips) note(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names == nil {
		r.names = map[string]int{}
	}
	r.names[name]++
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.alone.Add(1)
		r.note(fmt.Sprint(cmd.Args()[0]))
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.pipelines.Add(1)
		r.note(fmt.Sprintf("pipeline of %d %v", len(cmds), cmds[0].Args()[0]))
		return next(ctx, cmds)
	}
}

// A batch books in a few round trips whatever its size: its events' types
// looked up together, its events stored together, every target booked
// together; only asynq's enqueues go one by one (side by side). 100
// events to 4 subscribers: the publishes one by one make 100 lookups, 100
// stores and 100 bookings; the batch 3 round trips for them.
func TestPublishBatchBooksInAFewRoundTrips(t *testing.T) {
	b, ctx := setup(t), context.Background()
	for i := range 4 {
		// Fast enough that every delivery goes straight to asynq.
		b.put(t, tasks.Subscriber{ID: fmt.Sprintf("s%d", i), URL: "https://a.test", EventTypes: []string{"video.*"},
			Limit: limits.Limit{Rate: 1000, Burst: 1000, Period: time.Second}, MaxInFlight: 1000})
	}
	count := func(publish func(p *producer.Producer, prefix string) int) (alone, pipelines int64) {
		var rt roundTrips
		rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
		defer rdb.Close()
		rdb.AddHook(&rt)
		p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: b.ns, FreshMax: 1000, BatchAfter: -1})
		if err != nil {
			t.Fatal(err)
		}
		// Warmed up first: the namespace's layout is read, asynq's queues
		// registered and connections dialed once per producer, not per
		// publish.
		for round := range 2 {
			rt.alone.Store(0)
			rt.pipelines.Store(0)
			rt.names = nil
			if enqueued := publish(p, fmt.Sprintf("r%d-%d", time.Now().UnixNano(), round)); enqueued != 400 {
				t.Fatalf("%d enqueued; want 400", enqueued)
			}
		}
		t.Logf("commands: %v", rt.names)
		return rt.alone.Load(), rt.pipelines.Load()
	}
	evs := func(prefix string) []tasks.Event {
		out := make([]tasks.Event, 100)
		for i := range out {
			out[i] = event(fmt.Sprintf("%s-%03d", prefix, i), "video.trending")
		}
		return out
	}
	oneByOne, oneByOnePl := count(func(p *producer.Producer, prefix string) (n int) {
		for _, ev := range evs(prefix) {
			res, err := p.Publish(ctx, ev, nil)
			if err != nil {
				t.Fatal(err)
			}
			n += enqueued(res)
		}
		return n
	})
	batched, batchedPl := count(func(p *producer.Producer, prefix string) (n int) {
		got, err := p.PublishBatch(ctx, evs(prefix), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			n += enqueued(r.Result)
		}
		return n
	})
	t.Logf("one by one: %d commands alone, %d pipelines; batch: %d alone, %d pipelines", oneByOne, oneByOnePl, batched, batchedPl)
	// The 400 enqueues (asynq's script, one command each) are the batch's
	// only commands alone; its lookups, stores and bookings are 3
	// pipelines.
	if batched != 400 || batchedPl != 3 {
		t.Errorf("batch: %d commands alone, %d pipelines; want the 400 enqueues and 3 pipelines", batched, batchedPl)
	}
	if oneByOne+oneByOnePl < 400+300 {
		t.Errorf("one by one: %d round trips; want at least 700 (the check of this test)", oneByOne+oneByOnePl)
	}
}

func enqueued(res *producer.PublishResult) (n int) {
	for _, tg := range res.Targets {
		if tg.Outcome == producer.Enqueued {
			n++
		}
	}
	return n
}

// With Config.WaitReplicas a batch waits once for all its writes, and
// without the replica each of its events' targets fails with
// ErrNotReplicated, as a publish's does.
func TestPublishBatchWaitsForReplicasOnce(t *testing.T) {
	t.Parallel()
	var rt roundTrips
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, ReadTimeout: 500 * time.Millisecond})
	defer rdb.Close()
	rdb.AddHook(&rt)
	ns := testkit.Namespace("wait")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: id, URL: "https://a.test/h"}); err != nil {
			t.Fatal(err)
		}
	}
	rt.names = nil
	got, err := p.PublishBatch(ctx, []tasks.Event{event("e1", "t"), event("e2", "t"), event("e3", "t")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if !errors.Is(r.Err, producer.ErrNotReplicated) || len(r.Result.Targets) != 2 || r.Result.Targets[0].Outcome != producer.Failed {
			t.Errorf("event %d without a replica: %+v, %v; want its targets failed with ErrNotReplicated", i, r.Result, r.Err)
		}
	}
	if n := rt.names["pipeline of 2 publish"]; n != 1 {
		t.Errorf("%d waits for the replicas (commands %v); want one for the batch", n, rt.names)
	}
}
