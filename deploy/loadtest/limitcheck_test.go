package loadtest

import (
	"strings"
	"testing"
	"time"
)

// steady is n arrivals every step seconds from from.
func steady(from, step float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = from + float64(i)*step
	}
	return out
}

func rep(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func join(parts ...[]float64) []float64 {
	var out []float64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// twoBunches is 10/s from 0 to 3s, with the arrivals due in (0.6, 1.0]
// timestamped at 1.0005 and those due in (1.7, 2.1] at 2.1005: four at
// once each, one over the burst of 3.
func twoBunches() []float64 {
	var out []float64
	for _, v := range steady(0, 0.1, 31) {
		switch {
		case v > 0.65 && v < 1.05:
			v = 1.0005
		case v > 1.75 && v < 2.15:
			v = 2.1005
		}
		out = append(out, v)
	}
	return out
}

// stallAt is a stall whose timer fired lag late at offset at.
func stallAt(at, lag float64) stall {
	return stall{at: times(at)[0], lag: time.Duration(lag * float64(time.Second))}
}

func TestJudgeLimit(t *testing.T) {
	t.Parallel()
	// Every case: 10/s burst 3, no slack.
	for _, tc := range []struct {
		name     string
		at       []float64
		stalls   []stall
		exceeded bool // an unexcused violation: the scenario fails
		excuses  int
		dropped  int
		tried    int // stalls that overlapped the violation and did not explain it
	}{
		{name: "steady, no stall", at: steady(0, 0.1, 30)},
		{name: "violation, no stall", at: join(rep(0, 5), steady(0.5, 0.1, 10)), exceeded: true},
		{
			// 500ms stall at 2.0s, after which the receiver timestamps five
			// queued requests at once: its span [1.5, 2.05) holds 1.5..1.9
			// and the five.
			name: "bunch timestamped after a stall", at: join(steady(0, 0.1, 20), rep(2.0005, 5)),
			stalls: []stall{stallAt(2.0, 0.5)}, excuses: 1, dropped: 10,
		},
		{
			name: "a stall elsewhere excuses nothing", at: join(rep(0, 5), steady(0.5, 0.1, 20)),
			stalls: []stall{stallAt(2.0, 0.5)}, exceeded: true,
		},
		{
			// The stall overlaps the burst's window but holds only one of
			// its requests: without it, eight in 0s remain.
			name: "overlapping stall that does not explain it", at: join(rep(1.0, 8), []float64{1.01}, steady(1.5, 0.1, 5)),
			stalls: []stall{stallAt(1.02, 0.015)}, exceeded: true, tried: 1,
		},
		{
			// The stall's span holds the whole burst, but a 20ms stall can
			// bunch at most 0.2 requests of a 10/s sender, not 5.
			name: "stall too short for the excess", at: join(steady(0, 0.1, 10), rep(1.0, 8), steady(1.1, 0.1, 5)),
			stalls: []stall{stallAt(1.0, 0.02)}, exceeded: true, tried: 1,
		},
		{
			// 20/s for two seconds: the limiter let through twice its rate.
			// Six 25ms stalls inside drop a request or two each; no single
			// one explains the window. (The old rule dropped every stall's
			// arrivals at once, with a 200ms settle: 24 of the 40, and the
			// rest kept the limit.)
			name: "many small stalls do not add up", at: join(steady(0, 0.05, 40)),
			stalls:   []stall{stallAt(0.2, 0.025), stallAt(0.5, 0.025), stallAt(0.8, 0.025), stallAt(1.1, 0.025), stallAt(1.4, 0.025), stallAt(1.7, 0.025)},
			exceeded: true, tried: 6,
		},
		{
			// The sender keeps 10/s; two 300ms stalls each hold back the
			// requests due during them and the receiver timestamps them
			// together when it runs again.
			name: "two bunches, two stalls", at: twoBunches(),
			stalls: []stall{stallAt(1.0, 0.3), stallAt(2.1, 0.3)}, excuses: 2, dropped: 8,
		},
		{
			name: "one stall excuses one window only", at: twoBunches(),
			stalls: []stall{stallAt(1.0, 0.3)}, exceeded: true, excuses: 1, dropped: 4,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeLimit(times(tc.at...), 10, 3, 0, tc.stalls)
			if v.Worst.Exceeded != tc.exceeded || len(v.Excuses) != tc.excuses || v.Dropped != tc.dropped || len(v.Tried) != tc.tried {
				t.Fatalf("worst %+v, %d excuses %+v, dropped %d, tried %d; want exceeded %v, %d excuses, dropped %d, tried %d",
					v.Worst, len(v.Excuses), v.Excuses, v.Dropped, len(v.Tried), tc.exceeded, tc.excuses, tc.dropped, tc.tried)
			}
			for _, x := range v.Excuses {
				// An excuse names a violation, no larger than its stall could
				// bunch, and a stall that overlaps it.
				if !x.Window.Exceeded || x.Without.Exceeded || x.Dropped == 0 || float64(x.Window.Count) > x.Window.Allowed+x.Bunchable {
					t.Fatalf("excuse %+v", x)
				}
				from, to := x.Stall.At.Add(-time.Duration(x.Stall.LagMs*float64(time.Millisecond))), x.Stall.At.Add(stallSettle)
				if from.After(x.Window.To) || !to.After(x.Window.From) {
					t.Fatalf("excuse %+v: the stall does not overlap the window", x)
				}
			}
		})
	}
}

func TestWithoutStallsDropsExactlyTheStallsArrivals(t *testing.T) {
	t.Parallel()
	// Stall at 1.0 with 50ms lag and 50ms settle: [0.95, 1.05).
	at := times(0.9, 0.949, 0.95, 1.0, 1.04, 1.049, 1.05, 1.2)
	rest, dropped := withoutStalls(at, []stall{stallAt(1.0, 0.05)}, 50*time.Millisecond)
	if want := times(0.9, 0.949, 1.05, 1.2); dropped != 4 || len(rest) != len(want) {
		t.Fatalf("rest %v, dropped %d; want %v", rest, dropped, want)
	} else {
		for i := range want {
			if !rest[i].Equal(want[i]) {
				t.Fatalf("rest %v, want %v", rest, want)
			}
		}
	}
	if rest, dropped := withoutStalls(at, nil, time.Second); dropped != 0 || len(rest) != len(at) {
		t.Fatalf("no stalls: dropped %d", dropped)
	}
}

// An excused violation is an invalid run that hides an invariant; an
// unexcused one fails the scenario and says which stalls did not explain it.
func TestExcusedViolationHidesAndUnexcusedFails(t *testing.T) {
	t.Parallel()
	r := &ScenarioReport{}
	sr := &SubReport{ID: "bunched", Rate: 10, Burst: 3}
	r.judge(sr, times(join(steady(0, 0.1, 20), rep(2.0005, 5))...), []stall{stallAt(2.0, 0.5)}, 0)
	r.check(sr)
	bad := &SubReport{ID: "fast", Rate: 10, Burst: 3}
	r.judge(bad, times(join(rep(1.0, 8), []float64{1.01})...), []stall{stallAt(1.02, 0.015)}, 0)
	r.check(bad)
	r.finish(100)
	if r.Valid || len(r.Hiding) != 1 || !strings.HasPrefix(r.Hiding[0], "bunched: ") || len(sr.Excuses) != 1 || sr.StallExcluded != 10 {
		t.Fatalf("valid %v, hiding %q, excuses %+v", r.Valid, r.Hiding, sr.Excuses)
	}
	if r.Passed || len(r.Failures) != 1 || !strings.Contains(r.Failures[0], "fast: limit exceeded: 9 requests") ||
		!strings.Contains(r.Failures[0], "1 overlapping stalls") {
		t.Fatalf("passed %v, failures %q", r.Passed, r.Failures)
	}
}
