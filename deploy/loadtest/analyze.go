package loadtest

import (
	"math"
	"sort"
	"strings"
	"time"
)

// Window is the busiest stretch of a subscriber's requests measured against
// its limit: Count requests arrived within Span, from From to To, where
// the limit allows Allowed = Burst + Rate·(Span + slack).
type Window struct {
	Count    int       `json:"count"`
	Span     float64   `json:"span_s"`
	Allowed  float64   `json:"allowed"`
	Exceeded bool      `json:"exceeded"`
	From     time.Time `json:"from,omitzero"`
	To       time.Time `json:"to,omitzero"`
}

// worstWindow finds the window of arrivals (sorted by time) that comes
// closest to or goes furthest over burst + rate·t. The count in [i, j] less
// rate·(t_j − t_i) is (j − rate·t_j) − (i − rate·t_i) + 1, so one pass
// keeping the least i − rate·t_i finds it. slack covers the gap between the
// sender's limiter deciding and the request arriving here.
func worstWindow(at []time.Time, rate float64, burst int, slack time.Duration) Window {
	if len(at) == 0 || rate <= 0 {
		return Window{}
	}
	t0 := at[0]
	x := func(i int) float64 { return float64(i) - rate*at[i].Sub(t0).Seconds() }
	best, bi, bj := math.Inf(-1), 0, 0
	minI, minV := 0, x(0)
	for j := range at {
		if v := x(j); v < minV {
			minI, minV = j, v
		}
		// Ties go to the later, longer window: the largest count at that excess.
		if e := x(j) - minV + 1; e >= best-1e-9 {
			best, bi, bj = e, minI, j
		}
	}
	span := at[bj].Sub(at[bi]).Seconds()
	w := Window{Count: bj - bi + 1, Span: span, Allowed: float64(burst) + rate*(span+slack.Seconds()), From: at[bi], To: at[bj]}
	w.Exceeded = float64(w.Count) > w.Allowed+1e-9
	return w
}

// percentile of sorted durations, in milliseconds.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

// Latency is publish → delivery of one set of events.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func latencyOf(ds []time.Duration) Latency {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	l := Latency{N: len(ds), P50: percentile(ds, 0.50), P99: percentile(ds, 0.99)}
	if len(ds) > 0 {
		l.Max = float64(ds[len(ds)-1]) / float64(time.Millisecond)
	}
	return l
}

// deadTask is one archived task of a subscriber.
type deadTask struct {
	at     time.Time
	reason string
}

// outcome is what became of a subscriber's events, reconstructed from the
// generator's ledger, the receiver's arrivals and asynq's archive.
type outcome struct {
	published  map[string]time.Time
	delivered  map[string]time.Time // first 2xx arrival
	dead       map[string]deadTask
	duplicates int         // 2xx arrivals beyond the first for an event
	requests   []time.Time // every arrival, sorted
	settledAt  []time.Time // per settled event: delivery or dead-letter time
	lastSettle time.Time   //
	firstPub   time.Time   //
	latencies  []time.Duration
}

func buildOutcome(published map[string]time.Time, arrivals []Arrival, dead map[string]deadTask) *outcome {
	o := &outcome{published: published, delivered: map[string]time.Time{}, dead: dead}
	for _, a := range arrivals {
		o.requests = append(o.requests, a.At)
		if a.Status/100 != 2 {
			continue
		}
		if _, seen := o.delivered[a.ID]; seen {
			o.duplicates++
			continue
		}
		o.delivered[a.ID] = a.At
	}
	sort.Slice(o.requests, func(i, j int) bool { return o.requests[i].Before(o.requests[j]) })
	for id, at := range o.delivered {
		o.settledAt = append(o.settledAt, at)
		if p, ok := published[id]; ok {
			o.latencies = append(o.latencies, at.Sub(p))
		}
	}
	for id, d := range dead {
		if _, ok := o.delivered[id]; !ok {
			o.settledAt = append(o.settledAt, d.at)
		}
	}
	sort.Slice(o.settledAt, func(i, j int) bool { return o.settledAt[i].Before(o.settledAt[j]) })
	if n := len(o.settledAt); n > 0 {
		o.lastSettle = o.settledAt[n-1]
	}
	for _, p := range published {
		if o.firstPub.IsZero() || p.Before(o.firstPub) {
			o.firstPub = p
		}
	}
	return o
}

// lost counts published events neither delivered nor dead-lettered.
func (o *outcome) lost() int {
	n := 0
	for id := range o.published {
		_, d := o.delivered[id]
		_, x := o.dead[id]
		if !d && !x {
			n++
		}
	}
	return n
}

// latencyWhere is publish → delivery of the events published in [from, to).
func (o *outcome) latencyWhere(from, to time.Time) Latency {
	var ds []time.Duration
	for id, at := range o.delivered {
		if p, ok := o.published[id]; ok && !p.Before(from) && p.Before(to) {
			ds = append(ds, at.Sub(p))
		}
	}
	return latencyOf(ds)
}

// series returns, per whole second since start, the deliveries in that
// second and the backlog (published, not yet settled) at its end.
func (o *outcome) series(start time.Time, seconds int) (rate []float64, backlog []float64) {
	rate, backlog = make([]float64, seconds), make([]float64, seconds)
	sec := func(t time.Time) int { return int(math.Floor(t.Sub(start).Seconds())) }
	for _, at := range o.delivered {
		if s := sec(at); s >= 0 && s < seconds {
			rate[s]++
		}
	}
	pubs := make([]int, seconds+1)
	for _, p := range o.published {
		pubs[min(max(sec(p), 0), seconds)]++
	}
	sets := make([]int, seconds+1)
	for _, t := range o.settledAt {
		sets[min(max(sec(t), 0), seconds)]++
	}
	var p, s int
	for i := range seconds {
		p, s = p+pubs[i], s+sets[i]
		backlog[i] = float64(p - s)
	}
	return rate, backlog
}

// steadyRate is the mean deliveries per second over the seconds that
// started with at least a second's worth of backlog (so the subscriber
// could have been sent its limit), skipping the first such second (its
// burst allowance) and seconds when the endpoint was down on purpose.
func steadyRate(rate, backlog []float64, limit float64, downUntil int) float64 {
	var sum float64
	n, first := 0, true
	for i := 1; i < len(rate); i++ {
		if backlog[i-1] < limit || i < downUntil {
			continue
		}
		if first {
			first = false
			continue
		}
		sum += rate[i]
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// splitTaskID splits asynq task id "<subscriber>:<event>".
func splitTaskID(id string) (sub, event string, ok bool) {
	return strings.Cut(id, ":")
}
