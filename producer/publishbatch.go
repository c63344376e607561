package producer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// MaxBatch is the most events one PublishBatch or PublishEach (and POST
// /v1/events/batch) takes. Past ~100 a batch wins little more (its round
// trips are already shared: deploy/BENCHMARKS.md, batch publish) while one
// call holds more memory and one slow call delays more events.
const MaxBatch = 100

// handOutsAtOnce is how many of a batch's tasks are enqueued side by side:
// asynq enqueues one task per call, and a batch's go out together instead
// of one round trip after another.
const handOutsAtOnce = 32

// BatchEvent is one event of PublishEach.
type BatchEvent struct {
	Event tasks.Event
	Opts  *PublishOpts // nil: none
	// To, when set, sends the event to this subscriber alone, whatever its
	// filter, as SendTo does.
	To string
}

// BatchResult is one event's answer in a batch: what Publish (or SendTo)
// would have returned for it alone.
type BatchResult struct {
	Result *PublishResult // nil when Err says the event was refused whole
	Err    error
}

// PublishBatch publishes each of evs, with opts for all, as Publish does
// one, and answers each on its own, in order: an event refused (invalid,
// its id published before with other content, too large) writes nothing
// for itself and does not stop the others. The returned error is set only
// when the batch itself is refused (more than MaxBatch events), nothing
// written.
//
// A batch costs a few round trips, not a few per event: the subscribers
// of every event type are looked up together, the events stored together,
// every target booked together (limits.Gates.Book; one round trip per
// Cluster node), the tasks that go at once enqueued side by side, and
// Config.WaitReplicas waited for once.
func (p *Producer) PublishBatch(ctx context.Context, evs []tasks.Event, opts *PublishOpts) ([]BatchResult, error) {
	bes := make([]BatchEvent, len(evs))
	for i, ev := range evs {
		bes[i] = BatchEvent{Event: ev, Opts: opts}
	}
	return p.PublishEach(ctx, bes)
}

// PublishEach is PublishBatch with options, and a subscriber to send to
// alone, for each event.
func (p *Producer) PublishEach(ctx context.Context, evs []BatchEvent) ([]BatchResult, error) {
	if len(evs) > MaxBatch {
		return nil, &tasks.FieldError{Field: "events", Msg: fmt.Sprintf("at most %d events per call, got %d", MaxBatch, len(evs))}
	}
	out := make([]BatchResult, len(evs))
	items := make([]batchItem, len(evs))
	for i := range evs {
		it := &items[i]
		it.BatchEvent = evs[i]
		if tasks.IsOperatorType(it.Event.Type) {
			out[i].Err = &tasks.FieldError{Field: "type", Msg: "types starting with " + tasks.OperatorPrefix + " are hooklane's own events"}
		} else {
			out[i].Err = p.checkEvent(&it.Event, it.Opts)
		}
	}
	live := func(yield func(int, *batchItem) bool) {
		for i := range items {
			if out[i].Err == nil && out[i].Result == nil && !yield(i, &items[i]) {
				return
			}
		}
	}
	if err := p.batchTargets(ctx, items, out, live); err != nil {
		for i := range live {
			out[i].Err = err
		}
		return out, nil
	}
	now := p.nowFunc()
	for i, it := range live {
		if len(it.subs) == 0 {
			out[i].Result = &PublishResult{EventID: it.Event.ID, Targets: []Target{},
				Note: fmt.Sprintf("no subscriber matches type %q: nothing is stored or sent", it.Event.Type)}
			continue
		}
		if it.Opts != nil && it.Opts.NotBefore.After(now) {
			it.notBefore = it.Opts.NotBefore
		}
	}
	shards, err := p.shards(ctx)
	if err != nil {
		for i := range live {
			out[i].Err = err
		}
		return out, nil
	}
	p.storeBatch(ctx, items, out, live)
	// Every stored event's targets in one Book: one round trip (per
	// Cluster node), each event with a token of its own, so that an id
	// given twice in a batch is booked once and reported a duplicate the
	// second time, as two publishes in a row are.
	var bs []limits.Booking
	for _, it := range live {
		token := limits.NewToken()
		held := it.Opts == nil || !it.Opts.SkipPaused
		it.first = len(bs)
		for _, s := range it.subs {
			bs = append(bs, limits.Booking{Keys: p.keys.Gates(s.ID), EventID: it.Event.ID, EventType: it.Event.Type,
				NotBefore: it.notBefore, Horizon: p.horizon(s), Dedup: p.cfg.DedupWindow,
				MaxAttempts: cmp.Or(s.MaxAttempts, p.cfg.MaxAttempts), Held: held, Token: token, Pace: p.bookingPace(ctx, s, it.flood)})
		}
	}
	if len(bs) == 0 {
		return out, nil
	}
	booked, err := p.gates.Book(ctx, nil, bs...)
	if err != nil {
		for i := range live {
			out[i].Err = fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		return out, nil
	}
	results := p.handOutBatch(ctx, items, booked, now, shards, live)
	for i, res := range results {
		out[i].Result, _ = p.extResult(res, nil)
	}
	var all []*PublishResult
	for _, res := range results {
		all = append(all, res)
	}
	_ = p.waitReplicas(ctx, all...) // marks the targets it failed
	for i, res := range results {
		var errs []error
		for _, t := range res.Targets {
			if t.Err != nil && !slices.Contains(errs, t.Err) { // a failed wait fails each target with one error
				errs = append(errs, t.Err)
			}
		}
		out[i].Err = errors.Join(errs...)
	}
	return out, nil
}

// batchItem is one event of a batch on its way.
type batchItem struct {
	BatchEvent
	subs      []tasks.Subscriber
	flood     bool // its type's subscribers are past the tenant's fresh rate
	notBefore time.Time
	first     int // its first booking in the batch's Book
}

// batchTargets finds each live event's subscribers: those matching its
// type (every distinct type looked up in one round trip), or the one it
// names. An event naming an unknown subscriber is answered so.
func (p *Producer) batchTargets(ctx context.Context, items []batchItem, out []BatchResult, live func(func(int, *batchItem) bool)) error {
	var types, ids []string
	for _, it := range live {
		if it.To != "" {
			ids = append(ids, it.To)
		} else {
			types = append(types, it.Event.Type)
		}
	}
	events := map[string]int{}
	for _, t := range types {
		events[t]++
	}
	slices.Sort(types)
	matched, err := p.matchingTypes(ctx, slices.Compact(types), events)
	if err != nil {
		return err
	}
	named := map[string]tasks.Subscriber{}
	if len(ids) > 0 {
		slices.Sort(ids)
		ids = slices.Compact(ids)
		for _, id := range ids {
			if err := tasks.ValidateStoredSubscriberID(id); err != nil {
				for i, it := range live {
					if it.To == id {
						out[i].Err = err
					}
				}
			}
		}
		ids = slices.DeleteFunc(ids, func(id string) bool { return tasks.ValidateStoredSubscriberID(id) != nil })
		stored := make([]string, len(ids))
		for i, id := range ids {
			stored[i] = p.sid(id)
		}
		subs, err := p.subscribers(ctx, stored)
		if err != nil {
			return err
		}
		for _, s := range subs {
			named[p.ext(s.ID)] = s
		}
	}
	for i, it := range live {
		if it.To == "" {
			it.subs, it.flood = matched[it.Event.Type].subs, matched[it.Event.Type].flood
			continue
		}
		s, ok := named[it.To]
		if !ok {
			out[i].Err = fmt.Errorf("%w: %s", ErrUnknownSubscriber, it.To)
			continue
		}
		it.subs = []tasks.Subscriber{s}
	}
	return nil
}

// storeBatch stores every live event with subscribers in one round trip
// (per Cluster node), in order: an id given twice is stored by the first
// and compared by the second. An event refused (another event has its
// id) or not stored is answered so, and booked for nobody.
func (p *Producer) storeBatch(ctx context.Context, items []batchItem, out []BatchResult, live func(func(int, *batchItem) bool)) {
	var calls []*limits.Call
	var at []int
	for i, it := range live {
		if len(it.subs) == 0 {
			continue
		}
		c, err := p.storeCall(it.Event, it.subs, it.notBefore, true)
		if err != nil {
			out[i].Err = err
			continue
		}
		calls, at = append(calls, c), append(at, i)
	}
	if len(calls) > 0 {
		p.gates.RunScripts(ctx, calls)
	}
	for n, c := range calls {
		i := at[n]
		it := &items[i]
		switch {
		case c.Err != nil:
			out[i].Err = fmt.Errorf("%w: %v", ErrRedisUnavailable, c.Err)
		case len(c.Res) > 0 && c.Res[0] == "ok":
		case len(c.Res) > 0 && c.Res[0] == "check":
			// Stored by the release before, without a digest: compared
			// as a single publish compares it (rare).
			out[i].Err = p.storeEvent(ctx, it.Event, it.subs, it.notBefore, true)
		default:
			out[i].Err = errConflict(it.Event.ID)
		}
	}
	// The events answered since took no part: nothing booked for them.
	for i := range items {
		if out[i].Err != nil {
			items[i].subs = nil
		}
	}
}

// handOutBatch turns each live event's bookings into its result, the
// tasks that go at once enqueued side by side, then tells the dispatchers
// of the parked ones in one round trip.
func (p *Producer) handOutBatch(ctx context.Context, items []batchItem, booked []limits.Booked, now time.Time, shards int,
	live func(func(int, *batchItem) bool)) map[int]*PublishResult {
	results := map[int]*PublishResult{}
	type lotRef struct{ item, target int }
	var lots []lotRef
	var mu sync.Mutex
	sem := make(chan struct{}, handOutsAtOnce)
	// An id given again in the batch is handed out in a wave after the
	// one before it, as a publish after a publish: it finds the first's
	// task and is a duplicate.
	seen := map[string]int{}
	var waves [][]int
	for i, it := range live {
		results[i] = &PublishResult{EventID: it.Event.ID, Targets: make([]Target, len(it.subs))}
		w := seen[it.Event.ID]
		seen[it.Event.ID]++
		if w == len(waves) {
			waves = append(waves, nil)
		}
		waves[w] = append(waves[w], i)
	}
	for _, wave := range waves {
		var wg sync.WaitGroup
		for _, i := range wave {
			it, res := &items[i], results[i]
			for j, s := range it.subs {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					t, lot := p.target(ctx, it.Event.ID, s, booked[it.first+j], shards, bookPublish)
					res.Targets[j] = t
					if lot {
						mu.Lock()
						lots = append(lots, lotRef{i, j})
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
	}
	if len(lots) > 0 {
		// After the bookings, as fanOut tells them.
		if _, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, l := range lots {
				s := items[l.item].subs[l.target]
				limits.NotifyIn(ctx, pl, p.keys.Ready(s.Region), s.ID, booked[items[l.item].first+l.target].Due)
			}
			return nil
		}); err != nil {
			for _, l := range lots {
				t := &results[l.item].Targets[l.target]
				t.Outcome, t.Err = Failed, fmt.Errorf("%w: subscriber %s: %v", ErrRedisUnavailable, t.SubscriberID, err)
			}
		}
	}
	return results
}

// matchingTypes returns, for each event type, the subscribers whose filter
// matches it, by id: every type's lookup in one round trip (the
// directory is one slot).
// matched are the subscribers an event is for; flood: its tenant's
// deliveries this second are past Config.TenantFreshRate with them.
type matched struct {
	subs  []tasks.Subscriber
	flood bool
}

func (p *Producer) matchingTypes(ctx context.Context, types []string, events map[string]int) (map[string]matched, error) {
	out := make(map[string]matched, len(types))
	if len(types) == 0 {
		return out, nil
	}
	calls := make([]*limits.Call, len(types))
	tenant := p.writeTenant()
	for i, t := range types {
		idx := p.keys.IndexKeysFor(tenant, t)
		keys := append(idx, p.keys.SubscriberConfigs())
		if tenant != tasks.DefaultTenant && p.cfg.TenantFreshRate > 0 {
			keys = append(keys, p.keys.TenantFlow(tenant))
		}
		calls[i] = &limits.Call{Script: matchScript, Keys: keys, Args: []any{len(idx), max(1, events[t])}}
	}
	p.gates.RunScripts(ctx, calls)
	for i, t := range types {
		if err := calls[i].Err; err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		subs := make([]tasks.Subscriber, 0, len(calls[i].Res))
		var before int64
		if len(calls[i].Res) > 0 {
			before, _ = calls[i].Res[0].(int64)
		}
		for _, v := range calls[i].Res[min(1, len(calls[i].Res)):] {
			str, _ := v.(string)
			var s tasks.Subscriber
			if err := json.Unmarshal([]byte(str), &s); err != nil {
				p.cfg.Logger.Error("skipping unreadable subscriber", "err", err)
				continue
			}
			// the index is exact, and its tenant's; this is belt and braces
			if s.Matches(t) && tasks.TenantOf(s.ID) == p.writeTenant() {
				subs = append(subs, s)
			}
		}
		slices.SortFunc(subs, func(a, b tasks.Subscriber) int { return strings.Compare(a.ID, b.ID) })
		// past its tenant's fresh rate with this publish: the backlog lane
		flood := p.cfg.TenantFreshRate > 0 && before+int64(len(subs)*max(1, events[t])) > int64(p.cfg.TenantFreshRate) && tenant != tasks.DefaultTenant
		out[t] = matched{subs: subs, flood: flood}
	}
	return out, nil
}
