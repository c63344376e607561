package worker_test

// The chaos run's counts, its report (the figures deploy/BENCHMARKS.md
// keeps) and its checks.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// chaosCount is what became of a chaos run's events, and what its
// endpoints saw.
type chaosCount struct {
	published, delivered int
	dead, stuck          []chaosDelivery
	unaccepted           []chaosDelivery // delivered, by its record, with no 2xx at the receiver: a silent loss
	requests, duplicates int             // duplicates: 2xx acceptances beyond the first, summed over deliveries
	statuses             map[int]int     // requests by answer (0: reset)
	given                int             // Retry-After deadlines given for a dry bucket
	early, over          []string
	kinds                []chaosKind
	perKind              map[chaosKind]*kindCount
	hits                 map[string][]chaosHit // by "<sub>/<event>"

	kills     int
	redisDown time.Duration
	actions   []string
	drained   time.Duration
	settled   bool   // nothing left to run after the drain: queues, lots and hand-outs empty
	leftover  string // what was, when not settled (testkit.Leftover)
	refused   int64
	late      time.Duration
	rescued   string
	took      time.Duration
	cpu       string
}

type kindCount struct {
	subs, events, requests, duplicates int
	most, cap                          int       // the most requests in flight at one endpoint, and its max_in_flight
	last                               time.Time // the last 2xx
}

func countChaos(eps []*chaosEndpoint, plan []chaosDelivery, states []string) *chaosCount {
	c := &chaosCount{published: len(plan), statuses: map[int]int{}, perKind: map[chaosKind]*kindCount{}, hits: map[string][]chaosHit{}}
	kindOf := map[string]chaosKind{}
	for _, e := range eps {
		kindOf[e.id] = e.kind
		k := c.perKind[e.kind]
		if k == nil {
			k = &kindCount{}
			c.perKind[e.kind] = k
			c.kinds = append(c.kinds, e.kind)
		}
		tl := e.tally()
		k.subs++
		k.requests += len(tl.hits)
		k.most, k.cap = max(k.most, tl.most), e.maxInFlight
		c.requests += len(tl.hits)
		c.given += tl.given
		for _, h := range tl.hits {
			if h.accepted() && h.at.After(k.last) {
				k.last = h.at
			}
			c.statuses[h.status]++
			c.hits[e.id+"/"+h.event] = append(c.hits[e.id+"/"+h.event], h)
		}
		for _, s := range tl.early {
			c.early = append(c.early, e.id+": "+s)
		}
		for _, s := range tl.over {
			c.over = append(c.over, fmt.Sprintf("%s (max_in_flight %d): %s", e.id, e.maxInFlight, s))
		}
	}
	for i, d := range plan {
		k := c.perKind[kindOf[d.sub]]
		k.events++
		accepted := 0
		for _, h := range c.hits[d.sub+"/"+d.event] {
			if h.accepted() {
				accepted++
			}
		}
		c.duplicates += max(accepted-1, 0)
		k.duplicates += max(accepted-1, 0)
		switch states[i] {
		case tasks.StateDelivered:
			c.delivered++
			if accepted == 0 {
				c.unaccepted = append(c.unaccepted, d)
			}
		case tasks.StateDead:
			c.dead = append(c.dead, d)
		default:
			c.stuck = append(c.stuck, d)
		}
	}
	return c
}

// String is the run's report.
func (c *chaosCount) String(s chaosSize, seed uint64, start time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run %s (seed %d): 3 workers, %d subscribers, %d events (one subscriber each) published over %s; %s in all (%s)\n",
		s.name, seed, chaosSubscribers, c.published, (s.span * 9 / 10).Round(time.Second), c.took.Round(time.Second), c.cpu)
	fmt.Fprintf(&b, "chaos: %d kill -9 of a worker, Redis killed once (down %.1fs, AOF appendfsync always); %d publishes refused and sent again, publisher at most %s behind\n",
		c.kills, c.redisDown.Seconds(), c.refused, c.late.Round(time.Millisecond))
	fmt.Fprintf(&b, "  %s\n", strings.Join(c.actions, "; "))
	fmt.Fprintf(&b, "drain: %s after the chaos (limit %s); nothing left to run: %v\n", c.drained.Round(100*time.Millisecond), s.drain, c.settled)
	fmt.Fprintf(&b, "deliveries: %d delivered, %d dead, %d not final (lost or stuck), %d delivered without a 2xx at the receiver\n",
		c.delivered, len(c.dead), len(c.stuck), len(c.unaccepted))
	fmt.Fprintf(&b, "requests: %d (%.3f per delivery): 2xx %d, 429 %d (%d Retry-After deadlines for a dry bucket), 503 %d, resets %d; duplicates %d; early %d; over max_in_flight %d\n",
		c.requests, float64(c.requests)/float64(max(c.published, 1)), c.statuses[http.StatusOK], c.statuses[http.StatusTooManyRequests],
		c.given, c.statuses[http.StatusServiceUnavailable], c.statuses[0], c.duplicates, len(c.early), len(c.over))
	fmt.Fprintf(&b, "rescuer: %s\n", c.rescued)
	fmt.Fprintf(&b, "%-15s %5s %7s %9s %10s %14s %9s\n", "kind", "subs", "events", "requests", "duplicates", "most in flight", "last 2xx")
	for _, k := range c.kinds {
		n := c.perKind[k]
		fmt.Fprintf(&b, "%-15s %5d %7d %9d %10d %11d/%-2d %+8.1fs\n", k, n.subs, n.events, n.requests, n.duplicates, n.most, n.cap,
			n.last.Sub(start).Seconds())
	}
	b.WriteString("(last 2xx: from the chaos' start)\n")
	return strings.TrimRight(b.String(), "\n")
}

// check fails t for each broken promise. The stuck deliveries were
// reported already, with their diagnostics.
func (c *chaosCount) check(t *testing.T, pub *chaosPublisher) {
	t.Helper()
	pub.mu.Lock()
	for _, o := range pub.odd {
		t.Errorf("a publish failed for another reason than Redis being away: %s", o)
	}
	pub.mu.Unlock()
	if n := pub.acked.Load(); n != int64(c.published) {
		t.Errorf("%d of %d publishes acknowledged", n, c.published)
	}
	if len(c.dead) > 0 {
		t.Errorf("%d deliveries dead, where nothing could legitimately die (100 attempts, a 1 h horizon): %v", len(c.dead), first(c.dead, 10))
	}
	if len(c.unaccepted) > 0 {
		t.Errorf("%d deliveries recorded delivered that the receiver never accepted (a silent loss): %v", len(c.unaccepted), first(c.unaccepted, 10))
	}
	if len(c.early) > 0 {
		t.Errorf("%d requests before a Retry-After deadline the receiver gave: %v", len(c.early), c.early[:min(len(c.early), 10)])
	}
	if len(c.over) > 0 {
		t.Errorf("%d requests arrived with more in flight than the subscriber's max_in_flight: %v", len(c.over), c.over[:min(len(c.over), 10)])
	}
	if !c.settled && len(c.stuck) == 0 {
		t.Errorf("every delivery is final but something is left to run (an asynq task, a lot or hand-out entry): %s", c.leftover)
	}
	// Each zero above proves something only if the adversary acted.
	switch {
	case c.kills == 0:
		t.Errorf("no worker was killed")
	case c.redisDown == 0:
		t.Errorf("Redis was not restarted")
	case c.given == 0:
		t.Errorf("no rate-enforcing endpoint answered 429: '0 early' proves nothing")
	case c.statuses[http.StatusServiceUnavailable] == 0 || c.statuses[0] == 0:
		t.Errorf("no 503 (%d) or no reset (%d)", c.statuses[http.StatusServiceUnavailable], c.statuses[0])
	}
}

func first(ds []chaosDelivery, n int) []string {
	var out []string
	for _, d := range ds[:min(n, len(ds))] {
		out = append(out, d.sub+"/"+d.event)
	}
	return out
}
