package loadtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func times(offsets ...float64) []time.Time {
	t0 := time.Unix(1_700_000_000, 0)
	out := make([]time.Time, len(offsets))
	for i, o := range offsets {
		out[i] = t0.Add(time.Duration(o * float64(time.Second)))
	}
	return out
}

func TestWorstWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		at       []float64
		exceeded bool
		count    int
	}{
		// rate 10/s, burst 3
		{"burst then rate", []float64{0, 0, 0, 0.1, 0.2, 0.3, 0.4}, false, 7},
		{"one over the burst", []float64{0, 0, 0, 0}, true, 4},
		{"burst refills", []float64{0, 0, 0, 1, 1, 1}, false, 3},
		{"too fast after the burst", []float64{0, 0, 0, 0.05, 0.06, 0.07}, true, 6},
		{"empty", nil, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := worstWindow(times(tc.at...), 10, 3, 0)
			if w.Exceeded != tc.exceeded || w.Count != tc.count {
				t.Fatalf("%+v, want exceeded %v, count %d", w, tc.exceeded, tc.count)
			}
		})
	}
	// Slack forgives bunching from transit jitter, and no more.
	if w := worstWindow(times(0, 0, 0, 0.08), 10, 3, 20*time.Millisecond); w.Exceeded {
		t.Fatalf("within slack: %+v", w)
	}
}

func TestInvariantsFailTheScenario(t *testing.T) {
	t.Parallel()
	r := &ScenarioReport{}
	r.check(&SubReport{ID: "ok"})
	r.check(&SubReport{ID: "bad", Lost: 2, Stats: EndpointStats{Early: 1, Bans: 1, BadSig: 3},
		Worst: Window{Count: 9, Span: 0.1, Allowed: 4, Exceeded: true}})
	r.finish(100)
	if r.Passed || len(r.Failures) != 5 || !strings.Contains(strings.Join(r.Failures, "\n"), "bad: 2 events lost") {
		t.Fatalf("passed %v, failures %q", r.Passed, r.Failures)
	}
	if !r.Valid {
		t.Fatalf("invalid: %v", r.InvalidReasons)
	}
	// A slow generator or receiver leaves every invariant checked; a
	// failed publish hides whether its events were lost.
	late := &ScenarioReport{Generator: GenStats{Planned: 100, Late: 2}, ProbeP99Ms: 150, ProbeMaxMs: 300}
	late.finish(100)
	if late.Valid || len(late.InvalidReasons) != 3 || !late.Passed || len(late.Hiding) != 0 {
		t.Fatalf("valid %v (%v), passed %v, hiding %v", late.Valid, late.InvalidReasons, late.Passed, late.Hiding)
	}
	failed := &ScenarioReport{Generator: GenStats{Planned: 100, Failed: 1}}
	failed.finish(100)
	if failed.Valid || len(failed.Hiding) != 1 || !strings.Contains(failed.Hiding[0], "1 publishes failed") {
		t.Fatalf("valid %v, hiding %q", failed.Valid, failed.Hiding)
	}
}

func TestOutcome(t *testing.T) {
	t.Parallel()
	at := times(0, 1, 2, 3, 4)
	pub := map[string]time.Time{"a": at[0], "b": at[0], "c": at[1], "d": at[1]}
	arr := []Arrival{{At: at[1], ID: "a", Status: 500}, {At: at[2], ID: "a", Status: 200}, {At: at[2], ID: "b", Status: 200},
		{At: at[3], ID: "b", Status: 200}}
	o := buildOutcome(pub, arr, map[string]deadTask{"c": {at: at[3]}})
	if o.lost() != 1 || o.duplicates != 1 || len(o.delivered) != 2 || len(o.requests) != 4 {
		t.Fatalf("lost %d, duplicates %d, delivered %d", o.lost(), o.duplicates, len(o.delivered))
	}
	rate, backlog := o.series(at[0], 5)
	if want := []float64{0, 0, 2, 0, 0}; !equal(rate, want) {
		t.Fatalf("rate %v, want %v", rate, want)
	}
	if want := []float64{2, 4, 2, 1, 1}; !equal(backlog, want) {
		t.Fatalf("backlog %v, want %v", backlog, want)
	}
	if l := o.latencyWhere(at[0], at[1]); l.N != 2 || l.P50 != 2000 {
		t.Fatalf("latency %+v", l)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPeakAndDrain(t *testing.T) {
	t.Parallel()
	st := &Step{SpikeS: 2, RecoverS: 4, EndS: 9}
	peak, drain := peakAndDrain([]float64{0, 0, 50, 100, 80, 40, 3, 0, 0}, st, 5)
	if peak != 100 || drain != 3 {
		t.Fatalf("peak %v drain %v, want 100 and 3", peak, drain)
	}
	if _, drain := peakAndDrain([]float64{0, 0, 50, 100, 80, 40, 30, 20, 10}, st, 5); drain != -1 {
		t.Fatalf("drain %v, want -1 (never)", drain)
	}
}

func TestSpikeScheduleLeavesTimeToDrain(t *testing.T) {
	t.Parallel()
	shots, steps := spikeShots(SpikeSpec{BaseRate: 5, Multipliers: []int{3, 30}, Baseline: 10 * time.Second, Hold: 30 * time.Second}, 100)
	if len(steps) != 2 || steps[0].ExpectedBacklog != 0 || steps[1].ExpectedBacklog != 1500 {
		t.Fatalf("steps %+v", steps)
	}
	// 30×: 150/s against 100/s for 30s leaves 1500, drained at 95/s: the
	// recovery must last at least twice 15.8s.
	if rec := steps[1].EndS - steps[1].RecoverS; rec < 2*1500/95.0-0.01 {
		t.Fatalf("recovery %vs", rec)
	}
	if want := 5*10 + 15*30 + 5*10 + 5*10 + 150*30; len(shots) < want {
		t.Fatalf("%d shots, want at least %d", len(shots), want)
	}
	for i := 1; i < len(shots); i++ {
		if shots[i].At < shots[i-1].At {
			t.Fatalf("shot %d out of order", i)
		}
	}
}

func TestCommandRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-scenarios", "nope"}, `unknown scenario "nope"`},
		{[]string{"-scale", "0", "-scenarios", "throughput"}, "-scale must be positive"},
		{[]string{"-external-workers"}, "ExternalWorkers needs Redis"},
		{[]string{"-redis-url", "redis://127.0.0.1:1/0", "-redis-cluster-addrs", "127.0.0.1:2"}, "choose one"},
		{[]string{"-redis-cluster-addrs", "127.0.0.1"}, "host:port"},
		// Zero would silently read as the default.
		{[]string{"-workers", "0"}, "-workers must be at least 1, not 0"},
		{[]string{"-workers", "-2"}, "-workers must be at least 1, not -2"},
		{[]string{"-workers", "65"}, "Workers must be 1-64, not 65"},
		{[]string{"-workers", "2", "-external-workers", "-redis-url", "redis://127.0.0.1:1/0"}, "with ExternalWorkers it starts none"},
		{[]string{"-floor-servers", "0"}, "-floor-servers must be at least 1"},
		{[]string{"-floor-servers", "100"}, "FloorServers must be 1-64, not 100"},
		{[]string{"-tput-subscribers", "0"}, "-tput-subscribers must be at least 1"},
		{[]string{"-tput-subscribers", "1001"}, "ThroughputSubscribers must be 1-1000"},
		{[]string{"-concurrency", "0"}, "-concurrency must be at least 1"},
		{[]string{"-shards", "-1"}, "Shards must be 0 (the namespace's default) or 1-256, not -1"},
		{[]string{"-shards", "257"}, "Shards must be 0 (the namespace's default) or 1-256, not 257"},
		{[]string{"-workers", "x"}, `invalid value "x" for flag -workers`},
		// -cluster starts a Cluster of its own: another Redis is a mistake.
		{[]string{"-cluster", "-redis-url", "redis://127.0.0.1:1/0"}, "Cluster starts a Redis Cluster of its own, but Redis is set (single)"},
		{[]string{"-cluster", "-redis-cluster-addrs", "127.0.0.1:2"}, "but Redis is set (cluster)"},
		{[]string{"-cluster", "-external-workers"}, "ExternalWorkers needs Redis"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			var stdout, stderr strings.Builder
			err := Command(context.Background(), append(tt.args, "-out", out), "", &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one saying %q", err, tt.want)
			}
			// Refused before anything ran: no Redis started, no report.
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("the refused run left %v in -out", ents)
			}
		})
	}
}
