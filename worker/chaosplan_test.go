package worker_test

// The chaos run's plan: its two sizes, its forty subscribers and the
// publisher that sends the events through the producer SDK, again after a
// refusal while Redis is down, until each is acknowledged.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// chaosSize is one chaos run's size.
type chaosSize struct {
	name   string
	events int           // one subscriber each, the same number to every subscriber
	span   time.Duration // the chaos: publishing (its first 90%), kills and the Redis restart
	// killMin, killMax bound the time between two kills (from the restart
	// of the last killed worker).
	killMin, killMax time.Duration
	burstEvery       time.Duration // a 503-bursts endpoint's period (503s for 2 s of it)
	drain            time.Duration // the longest wait, after the chaos, for every delivery to end
	poll             time.Duration // how often the drain reads every delivery's record
	// idle ends the drain early when nothing is left to run (asynq's
	// queues, the lots and the hand-outs are empty) and no delivery has
	// ended for this long: what is stranded then stays so.
	idle time.Duration
	// shorten kills every worker when the chaos ends and moves the leases
	// back (shortenRecovery) instead of waiting out asynq's lease
	// recovery (one to two minutes after a kill), which the short run's
	// budget cannot.
	shorten bool
}

var (
	// chaosShort is make test's run, about 30 s with the drain: 24
	// events to each subscriber, a kill every 3-6 s so that its 15 s see
	// two or three.
	chaosShort = chaosSize{name: "short", events: 960, span: 15 * time.Second, killMin: 3 * time.Second, killMax: 6 * time.Second,
		burstEvery: 6 * time.Second, drain: 20 * time.Second, poll: 500 * time.Millisecond, idle: 6 * time.Second, shorten: true}
	// chaosFull is make chaos' run (HOOKLANE_CHAOS=full), issue 32's size.
	chaosFull = chaosSize{name: "full", events: 20000, span: 3 * time.Minute, killMin: 5 * time.Second, killMax: 15 * time.Second,
		burstEvery: 10 * time.Second, drain: 3 * time.Minute, poll: 2 * time.Second, idle: time.Minute}
)

// chaosSizeFromEnv is the size HOOKLANE_CHAOS names (short, the default,
// or full); HOOKLANE_CHAOS_EVENTS and HOOKLANE_CHAOS_SPAN override its
// event count and span.
func chaosSizeFromEnv(t testing.TB) chaosSize {
	t.Helper()
	var s chaosSize
	switch v := os.Getenv("HOOKLANE_CHAOS"); v {
	case "", "short":
		s = chaosShort
	case "full":
		s = chaosFull
	default:
		t.Fatalf("HOOKLANE_CHAOS=%q: want short or full", v)
	}
	if v := os.Getenv("HOOKLANE_CHAOS_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < chaosSubscribers || n > 200_000 {
			t.Fatalf("HOOKLANE_CHAOS_EVENTS=%q: want %d to 200000", v, chaosSubscribers)
		}
		s.events = n
	}
	if v := os.Getenv("HOOKLANE_CHAOS_SPAN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second || d > time.Hour {
			t.Fatalf("HOOKLANE_CHAOS_SPAN=%q: want a duration from 10s to 1h", v)
		}
		s.span = d
	}
	return s
}

// chaosSeed is HOOKLANE_CHAOS_SEED, or a new one: the schedule (which
// worker is killed when, when Redis restarts) and the resets follow it.
func chaosSeed(t testing.TB) uint64 {
	if v := os.Getenv("HOOKLANE_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("HOOKLANE_CHAOS_SEED=%q: want an unsigned integer", v)
		}
		return n
	}
	return rand.Uint64()
}

const chaosSubscribers = 40

// chaosEndpoints are the forty subscribers' endpoints: 12 fast, 8 slow
// (200 ms, 2 slots), 8 rate-enforcing (their own bucket at 5/s, burst 3,
// under the 6/s they are registered with; Retry-After 1 or 2 s; one slot,
// so that nothing is on its way when a 429 is answered and any request
// before its deadline is early), 6 with 503 bursts (2 s every burstEvery)
// and 6 resetting 15% of their connections.
func chaosEndpoints(s chaosSize) []*chaosEndpoint {
	var eps []*chaosEndpoint
	add := func(n int, prefix string, mk func(i int) chaosEndpoint) {
		for i := range n {
			e := mk(i)
			e.id = fmt.Sprintf("%s-%02d", prefix, i)
			eps = append(eps, &e)
		}
	}
	add(12, "fast", func(int) chaosEndpoint { return chaosEndpoint{kind: kindFast, maxInFlight: 10} })
	add(8, "slow", func(int) chaosEndpoint {
		return chaosEndpoint{kind: kindSlow, maxInFlight: 2, delay: 200 * time.Millisecond}
	})
	add(8, "enforcing", func(i int) chaosEndpoint {
		return chaosEndpoint{kind: kindEnforcing, maxInFlight: 1, rate: 5, burst: 3, retryAfter: 1 + i%2}
	})
	add(6, "bursts", func(i int) chaosEndpoint {
		return chaosEndpoint{kind: kindBursts, maxInFlight: 5, every: s.burstEvery, burstFor: 2 * time.Second,
			phase: time.Duration(i) * s.burstEvery / 6}
	})
	add(6, "resets", func(int) chaosEndpoint { return chaosEndpoint{kind: kindResets, maxInFlight: 5, resetShare: 0.15} })
	return eps
}

// chaosSubscriber is the subscriber of endpoint e: nothing may die in the
// run (100 attempts, an hour's horizon), so "0 dead" is the check.
func chaosSubscriber(e *chaosEndpoint) tasks.Subscriber {
	lim := limits.Limit{Rate: 50, Burst: 10, Period: time.Second}
	switch e.kind {
	case kindFast:
		lim = limits.Limit{Rate: 200, Burst: 50, Period: time.Second}
	case kindEnforcing:
		lim = limits.Limit{Rate: 6, Burst: 4, Period: time.Second}
	}
	return tasks.Subscriber{ID: e.id, URL: e.URL(), EventTypes: []string{"chaos." + e.id}, Limit: lim,
		MaxInFlight: e.maxInFlight, MaxAttempts: 100, RetryHorizon: tasks.Duration(time.Hour)}
}

// chaosPlan is the events in publishing order: runs of ten to one
// subscriber, the subscribers in turn, so that each gets bursts (the
// rate-enforcing ones answer 429 in every run).
func chaosPlan(eps []*chaosEndpoint, events int) []chaosDelivery {
	const run = 10
	per := events / len(eps)
	var plan []chaosDelivery
	for from := 0; from < per; from += run {
		for _, e := range eps {
			for i := from; i < min(from+run, per); i++ {
				plan = append(plan, chaosDelivery{sub: e.id, event: fmt.Sprintf("%s-e%05d", e.id, i)})
			}
		}
	}
	return plan
}

// chaosPublisher publishes a plan evenly over a span, each event again
// after a refusal (Publish is safe to repeat) until it is acknowledged.
type chaosPublisher struct {
	done    chan struct{}
	stop    atomic.Bool
	acked   atomic.Int64
	refused atomic.Int64 // publishes refused (Redis down) and sent again
	late    atomic.Int64 // the most the publisher fell behind its schedule, in ms
	mu      sync.Mutex
	odd     []string // refusals that were not Redis being away
}

func publishPlan(p *producer.Producer, plan []chaosDelivery, span time.Duration) *chaosPublisher {
	pub := &chaosPublisher{done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(pub.done)
		for i, d := range plan {
			at := start.Add(time.Duration(float64(span) * float64(i) / float64(len(plan))))
			if wait := time.Until(at); wait > 0 {
				time.Sleep(wait) // the schedule
			} else {
				pub.late.Store(max(pub.late.Load(), -wait.Milliseconds()))
			}
			ev := tasks.Event{ID: d.event, Type: "chaos." + d.sub, Data: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
			for !pub.stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := p.Publish(ctx, ev, nil)
				cancel()
				if err == nil {
					pub.acked.Add(1)
					break
				}
				pub.refused.Add(1)
				if !errors.Is(err, producer.ErrRedisUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
					pub.mu.Lock()
					pub.odd = append(pub.odd, fmt.Sprintf("%s: %v", d.event, err))
					pub.mu.Unlock()
				}
				time.Sleep(100 * time.Millisecond) // Redis is away: try again soon
			}
		}
	}()
	return pub
}
