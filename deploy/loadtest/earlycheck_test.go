package loadtest

import "testing"

func TestStallAcrossADeadlineLeavesEarlyUnproven(t *testing.T) {
	t.Parallel()
	deadline := times(2.0)
	for _, tc := range []struct {
		name   string
		at     []float64
		stalls []stall
		want   int // requests stamped after the deadline within a straddling stall
	}{
		{"no stall", []float64{1.0, 2.001}, nil, 0},
		// [1.95, 2.05): began before the deadline, the 2.001 stamp may hide 1.99.
		{"stall straddles the deadline", []float64{1.0, 2.001, 2.2}, []stall{stallAt(2.0, 0.05)}, 1},
		// [2.01, 2.09): began after the deadline; nothing stamped in it was early.
		{"stall begins after the deadline", []float64{1.0, 2.02}, []stall{stallAt(2.04, 0.03)}, 0},
		// [1.5, 1.65): over before the deadline.
		{"stall before the deadline", []float64{1.0, 2.001}, []stall{stallAt(1.6, 0.1)}, 0},
		{"straddled, nothing stamped after", []float64{1.0, 2.3}, []stall{stallAt(2.0, 0.05)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &ScenarioReport{}
			sr := &SubReport{ID: "p"}
			r.judgeEarly(sr, deadline, times(tc.at...), tc.stalls)
			n := 0
			for _, b := range sr.Blurred {
				n += b.Requests
			}
			if n != tc.want || len(r.Hiding) != len(sr.Blurred) || (tc.want > 0) != (len(r.Hiding) == 1) {
				t.Fatalf("blurred %+v, hiding %q; want %d requests", sr.Blurred, r.Hiding, tc.want)
			}
		})
	}
}
