package loadtest

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// Ledger is what the generator published: per subscriber, each event's
// publish time (the start of the Publish call that enqueued it).
type Ledger struct {
	mu  sync.Mutex
	pub map[string]map[string]time.Time // subscriber → event id → publish start
}

func newLedger() *Ledger { return &Ledger{pub: map[string]map[string]time.Time{}} }

func (l *Ledger) add(sub, id string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.pub[sub]
	if m == nil {
		m = map[string]time.Time{}
		l.pub[sub] = m
	}
	if _, ok := m[id]; !ok {
		m[id] = at
	}
}

// For returns a copy of subscriber sub's events and their publish times.
func (l *Ledger) For(sub string) map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]time.Time, len(l.pub[sub]))
	for k, v := range l.pub[sub] {
		out[k] = v
	}
	return out
}

// Count is the number of events published to sub.
func (l *Ledger) Count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pub[sub])
}

// GenStats says whether the generator kept its schedule.
type GenStats struct {
	Planned int           `json:"planned"`
	Sent    int           `json:"sent"`   // Publish calls that returned without error (possibly after retries)
	Failed  int           `json:"failed"` // events still failing after retries
	Late    int           `json:"late"`   // started more than LateAfter after their due time
	MaxLate time.Duration `json:"max_late_ns"`
	P99Late time.Duration `json:"p99_late_ns"`
}

// Behind reports whether more than 1% of the plan started late: the
// generator, not the system under test, set the pace (seed 003's
// "dropped iterations above 1% of the plan").
func (g GenStats) Behind() bool { return g.Planned > 0 && float64(g.Late) > 0.01*float64(g.Planned) }

// Generator publishes events on an open-loop schedule through the real
// producer SDK: a pool of publishers takes each event at its due time, and
// an event that finds no free publisher starts late and is counted so.
type Generator struct {
	P         *producer.Producer
	Ledger    *Ledger
	Workers   int           // publishers; default 32
	LateAfter time.Duration // lateness that counts as behind; default 250ms
	// Send, when set, publishes each event instead of P, on the same
	// schedule and judged as late alike (the trickle scenario's floor
	// enqueues its plain asynq tasks so); nothing goes to the Ledger.
	Send func(context.Context, tasks.Event) error
}

// Shot is one scheduled publish.
type Shot struct {
	At    time.Duration // after the run's start
	Event tasks.Event
}

// Run publishes shots (sorted by At) starting at start and returns when all
// are published or ctx is done. With openLoop false the schedule is only a
// queue (as fast as possible) and lateness is not judged.
func (g *Generator) Run(ctx context.Context, start time.Time, shots []Shot, openLoop bool) GenStats {
	workers := g.Workers
	if workers <= 0 {
		workers = 32
	}
	lateAfter := g.LateAfter
	if lateAfter <= 0 {
		lateAfter = 250 * time.Millisecond
	}
	type job struct {
		due  time.Time
		shot *Shot
	}
	jobs := make(chan job)
	var mu sync.Mutex
	st := GenStats{Planned: len(shots)}
	lates := make([]time.Duration, 0, len(shots))
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				began := time.Now()
				err := g.publish(ctx, j.shot.Event, began)
				mu.Lock()
				if late := began.Sub(j.due); openLoop {
					lates = append(lates, late)
					if late > lateAfter {
						st.Late++
					}
					st.MaxLate = max(st.MaxLate, late)
				}
				if err != nil {
					st.Failed++
				} else {
					st.Sent++
				}
				mu.Unlock()
			}
		}()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for i := range shots {
		due := start.Add(shots[i].At)
		if d := time.Until(due); d > 0 && openLoop {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break loop
			}
		}
		select {
		case jobs <- job{due: due, shot: &shots[i]}:
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	if len(lates) > 0 {
		sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
		st.P99Late = lates[len(lates)*99/100]
	}
	return st
}

// publish calls Publish, repeating it (which is safe) when part of the
// fan-out failed, and records what was enqueued.
func (g *Generator) publish(ctx context.Context, ev tasks.Event, began time.Time) error {
	if g.Send != nil {
		return g.Send(ctx, ev)
	}
	var err error
	for try := range 3 {
		if try > 0 && !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
		var res *producer.PublishResult
		res, err = g.P.Publish(ctx, ev, nil)
		if res != nil {
			for _, t := range res.Targets {
				// A duplicate on a repeat is the earlier call's enqueue.
				if t.Outcome.Booked() || (try > 0 && t.Outcome == producer.Duplicate) {
					g.Ledger.add(t.SubscriberID, ev.ID, began)
				}
			}
		}
		if err == nil || errors.Is(err, producer.ErrInvalid) {
			return err
		}
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// lagProbe measures how late this process's timers fire: when the harness
// is starved of CPU its receiver answers late too, and the run says so.
type lagProbe struct {
	mu      sync.Mutex
	samples []time.Duration
	stalls  []stall
}

// stall is a timer that fired lag late at at: the process did nothing for
// lag before at, and requests that reached the receiver meanwhile were
// timestamped at about at, bunched.
type stall struct {
	at  time.Time
	lag time.Duration
}

// stallLag is the timer lateness recorded as a stall.
const stallLag = 20 * time.Millisecond

// run ticks every 10ms until ctx is done.
func (p *lagProbe) run(ctx context.Context) {
	const tick = 10 * time.Millisecond
	next := time.Now().Add(tick)
	t := time.NewTimer(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			lag := max(now.Sub(next), 0)
			p.mu.Lock()
			p.samples = append(p.samples, lag)
			if lag >= stallLag {
				p.stalls = append(p.stalls, stall{at: now, lag: lag})
			}
			p.mu.Unlock()
			next = now.Add(tick)
			t.Reset(tick)
		}
	}
}

// take returns the p99 and max lag and the stalls since the last take,
// and resets.
func (p *lagProbe) take() (p99, worst time.Duration, stalls []stall) {
	p.mu.Lock()
	s, stalls := p.samples, p.stalls
	p.samples, p.stalls = nil, nil
	p.mu.Unlock()
	if len(s) == 0 {
		return 0, 0, stalls
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)*99/100], s[len(s)-1], stalls
}
