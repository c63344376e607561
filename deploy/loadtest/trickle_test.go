package loadtest

import (
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// The trickle's schedule gives each of n subscribers sweeps events, each
// n/rate after its previous one, in one schedule sorted by time; each
// event's type is wanted by exactly one subscriber, so none ever has a
// second event waiting behind its first.
func TestTrickleShotsGiveEachSubscriberOneEventAtATime(t *testing.T) {
	const n, sweeps, rate = 7, 4, 50.0
	shots := trickleShots("tr0", n, sweeps, rate)
	if len(shots) != n*sweeps {
		t.Fatalf("%d shots, want %d subscribers × %d sweeps", len(shots), n, sweeps)
	}
	if !slices.IsSortedFunc(shots, func(a, b Shot) int { return int(a.At - b.At) }) {
		t.Fatal("shots not sorted by At")
	}
	subs := trickleSubs(n)
	ids := map[string]bool{}
	at := map[string][]time.Duration{} // subscriber → its events' times
	for _, s := range shots {
		if err := s.Event.Validate(); err != nil {
			t.Fatalf("event %+v: %v", s.Event, err)
		}
		if ids[s.Event.ID] {
			t.Fatalf("event id %s twice", s.Event.ID)
		}
		ids[s.Event.ID] = true
		var to []string
		for _, sub := range subs {
			if (&tasks.Subscriber{EventTypes: sub.EventTypes}).Matches(s.Event.Type) {
				to = append(to, sub.ID)
			}
		}
		if len(to) != 1 {
			t.Fatalf("event type %s matches subscribers %v, want exactly one", s.Event.Type, to)
		}
		at[to[0]] = append(at[to[0]], s.At)
	}
	gap := time.Duration(n / rate * float64(time.Second))
	for _, sub := range subs {
		ts := at[sub.ID]
		if len(ts) != sweeps {
			t.Fatalf("%s has %d events, want %d", sub.ID, len(ts), sweeps)
		}
		for i := 1; i < len(ts); i++ {
			if d := ts[i] - ts[i-1]; (d - gap).Abs() > time.Microsecond {
				t.Fatalf("%s: events %d and %d are %s apart, want n/rate = %s", sub.ID, i-1, i, d, gap)
			}
		}
	}
	if last, want := shots[len(shots)-1].At, time.Duration(float64(n*sweeps-1)/rate*float64(time.Second)); (last - want).Abs() > time.Microsecond {
		t.Fatalf("last event at %s, want %s: the schedule runs at %g/s", last, want, rate)
	}
}

// The trickle's summary gives hooklane's handler runs and the CPU ratio of
// the median rounds, picked by CPU per delivery (the rate is the
// schedule's on both paths).
func TestTrickleSummaryComparesTheMedianRoundsCPU(t *testing.T) {
	path := func(redis, server, harness float64) PathResult {
		return PathResult{Redis: RedisCost{CPUUsecPerDelivery: redis}, ServerCPU: server, HarnessCPU: harness, PerSec: 1000}
	}
	tr := Trickle{FloorRounds: []PathResult{path(100, 900, 100), path(100, 300, 100), path(100, 400, 100)},
		HooklaneRounds: []PathResult{path(300, 400, 100), path(300, 900, 100)}, RunsPerDelivery: 1}
	tr.Floor, tr.Hooklane = cpuMedian(tr.FloorRounds), cpuMedian(tr.HooklaneRounds)
	tr.CPURatio = ratio(tr.Hooklane.CPU(), tr.Floor.CPU())
	var b strings.Builder
	tr.summary(&b)
	for _, want := range []string{"1.000 handler runs per delivery", "hooklane 800 µs, floor 600 µs: 1.33× the floor's", "floor 1100, 500, 600; hooklane 800, 1300"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary:\n%s\nwant a line with %q", b.String(), want)
		}
	}
}

// TestTrickleSmallRun runs the trickle scenario alone at a small size
// with an in-process worker and floor: both paths deliver every event of
// every round, hooklane each once, in one handler run.
func TestTrickleSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test; runs ~15s")
	}
	spec := TrickleSpec{Subscribers: 20, Sweeps: 3, Rate: 100, Rounds: 2}
	rep := runLogged(t, 2*time.Minute, Config{Out: t.TempDir(), Scenarios: []string{ScenarioTrickle}, Trickle: &spec,
		Timeout: 60 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	checkTrickle(t, scenario(t, rep, ScenarioTrickle), spec)
}

// checkTrickle asserts what every trickle run must show: each round's
// events delivered on both paths, hooklane's each once in one handler run,
// no invariant broken or hidden.
func checkTrickle(t *testing.T, r *ScenarioReport, spec TrickleSpec) {
	t.Helper()
	for _, f := range r.Failures {
		t.Errorf("trickle: invariant broken: %s", f)
	}
	for _, h := range r.Hiding {
		t.Errorf("trickle: invalid in a way that could hide a broken invariant: %s", h)
	}
	per, rounds := spec.Subscribers*spec.Sweeps, max(spec.Rounds, 1)
	if r.Published != per*rounds || r.Delivered != r.Published || r.Lost != 0 || r.Duplicates != 0 {
		t.Errorf("trickle: published %d, delivered %d, lost %d, duplicates %d: want %d each delivered once",
			r.Published, r.Delivered, r.Lost, r.Duplicates, per*rounds)
	}
	tr := r.Trickle
	if tr == nil || len(tr.FloorRounds) != rounds || len(tr.HooklaneRounds) != rounds {
		t.Fatalf("trickle %+v: want %d rounds of each path", tr, rounds)
	}
	for i := range rounds {
		if f, h := tr.FloorRounds[i].Deliveries, tr.HooklaneRounds[i].Deliveries; f != per || h != per {
			t.Errorf("round %d: floor delivered %d, hooklane %d, want %d each", i, f, h, per)
		}
	}
	// One run per delivery: no event was deferred behind another.
	if math.Abs(tr.RunsPerDelivery-1) > 0.05 || tr.Latency.N != per*rounds {
		t.Errorf("trickle: %.3f handler runs per delivery, latency of %d events: want 1 run for each of %d", tr.RunsPerDelivery, tr.Latency.N, per*rounds)
	}
}
