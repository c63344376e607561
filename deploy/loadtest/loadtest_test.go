package loadtest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/worker"
)

// TestSmallRunKeepsInvariants runs every scenario at a small size against a
// real redis-server, real HTTP endpoints and an in-process worker, and
// asserts only the invariants: nothing lost, no request before a
// Retry-After deadline, no ban, no limit exceeded, no bad signature. Speeds
// are not asserted: `make bench` measures them.
func TestSmallRunKeepsInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test; runs ~40s")
	}
	out := t.TempDir()
	cfg := Config{
		Out: out,
		Viral: &ViralSpec{Events: 150, BurstRate: 300, CRMDown: 3 * time.Second,
			SlowDelay: 100 * time.Millisecond, Extras: true},
		Spike: &SpikeSpec{BaseRate: 4, Multipliers: []int{3, 10}, Baseline: 2 * time.Second,
			Hold: 3 * time.Second, CappedRate: 20},
		Throughput: &ThroughputSpec{Subscribers: 3, Events: 100},
		// Short backoff so the down CRM and the flaky endpoint settle in
		// seconds; the limits and Retry-After handling are the real ones.
		Worker:  worker.Config{BackoffBase: 200 * time.Millisecond, BackoffMax: 2 * time.Second},
		Timeout: 90 * time.Second,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.Summary(&sb)
	t.Log("\n" + sb.String())
	if len(rep.Scenarios) != 3 {
		t.Fatalf("%d scenario reports, want 3", len(rep.Scenarios))
	}
	for _, r := range rep.Scenarios {
		// A limit violation excused by a stall, or a publish whose fate the
		// ledger does not know, could be a broken invariant: fail.
		for _, h := range r.Hiding {
			t.Errorf("%s: invalid in a way that could hide a broken invariant: %s", r.Name, h)
		}
		for _, s := range r.Subscribers {
			if len(s.Excuses) > 0 || s.StallExcluded > 0 {
				t.Errorf("%s/%s: %d requests left out of the limit check for stalls %+v", r.Name, s.ID, s.StallExcluded, s.Excuses)
			}
		}
		if !r.Valid && len(r.Hiding) == 0 {
			// A slow generator or receiver: every invariant below is still
			// checked on complete data, and the adversary checks below
			// fail if the slower pace stopped pushing the limiters.
			t.Logf("%s: run invalid: %v", r.Name, r.InvalidReasons)
		}
		for _, f := range r.Failures {
			t.Errorf("%s: %s", r.Name, f)
		}
		if r.Published == 0 || r.Lost != 0 || r.Published != r.Delivered+r.Dead {
			t.Errorf("%s: published %d, delivered %d, dead %d, lost %d: want every event delivered or dead",
				r.Name, r.Published, r.Delivered, r.Dead, r.Lost)
		}
		for _, s := range r.Subscribers {
			if s.Stats.Early != 0 || s.Stats.Bans != 0 || s.Worst.Exceeded || s.Stats.BadSig != 0 {
				t.Errorf("%s/%s: early %d, bans %d, worst window %+v, bad signatures %d",
					r.Name, s.ID, s.Stats.Early, s.Stats.Bans, s.Worst, s.Stats.BadSig)
			}
		}
		if _, err := os.Stat(filepath.Join(out, r.Chart)); r.Chart == "" || err != nil {
			t.Errorf("%s: chart %q missing: %v", r.Name, r.Chart, err)
		}
	}
	// The adversary must actually have been adversarial, or the test
	// proves nothing.
	viral := rep.Scenarios[0]
	bySub := map[string]*SubReport{}
	for _, s := range viral.Subscribers {
		bySub[s.ID] = s
	}
	if s := bySub["viral-flaky"]; s.Stats.Resets+s.Stats.Failed == 0 || s.Delivered == 0 {
		t.Errorf("flaky endpoint: %d resets, %d 5xx, %d delivered", s.Stats.Resets, s.Stats.Failed, s.Delivered)
	}
	if s := bySub["viral-gone"]; s.Dead != s.Published || s.DeadReasons["gone"] < 1 {
		t.Errorf("gone endpoint: %d dead of %d, reasons %v", s.Dead, s.Published, s.DeadReasons)
	}
	if s := bySub["viral-crm"]; s.Delivered == 0 || s.Runs <= int64(s.Delivered) {
		t.Errorf("crm: %d delivered in %d runs; want deliveries after refused connections", s.Delivered, s.Runs)
	}
	if len(viral.Latency) != 1 || viral.Latency[0].Alone.N != 150 || viral.Latency[0].WithBad.N != 150 {
		t.Errorf("latency comparison %+v", viral.Latency)
	}
	if tp := rep.Scenarios[2].Throughput; tp == nil || tp.Floor.Deliveries != 300 || tp.Hooklane.Deliveries != 300 {
		t.Errorf("throughput %+v: want 300 deliveries on each path", tp)
	}
	for _, f := range []string{"report.json", "summary.txt"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
