package loadtest

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// The tenants scenario publishes the small tenant's events at the same
// times alone and together (new ids), spread over the big tenant's
// publishing window, between the big tenant's events; both tenants use
// one event type, each subscriber registered with its own tenant.
func TestTenantsShotsSpreadTheSmallTenantOverTheBigOnesWindow(t *testing.T) {
	ts := TenantsSpec{BigSubscribers: 3, BigEvents: 5, SmallEvents: 4, Window: 2 * time.Second}
	alone, small, big := tenantsShots(ts)
	if len(alone) != 4 || len(small) != 4 || len(big) != 5 {
		t.Fatalf("%d alone, %d small, %d big shots, want 4, 4, 5", len(alone), len(small), len(big))
	}
	ids := map[string]bool{}
	for _, s := range slices.Concat(alone, small, big) {
		if err := s.Event.Validate(); err != nil || s.Event.Type != tenantsType {
			t.Fatalf("event %+v: %v, want a valid event of type %s", s.Event, err, tenantsType)
		}
		if ids[s.Event.ID] {
			t.Fatalf("event id %s twice", s.Event.ID)
		}
		ids[s.Event.ID] = true
	}
	for i := range small {
		if alone[i].At != small[i].At {
			t.Errorf("small event %d at %s alone, %s together: want the same pace", i, alone[i].At, small[i].At)
		}
		if at := small[i].At; at <= big[0].At || at >= ts.Window || slices.ContainsFunc(big, func(b Shot) bool { return b.At == at }) {
			t.Errorf("small event %d at %s: want it inside the big tenant's window (%s, %s), between its events", i, at, big[0].At, ts.Window)
		}
	}
	if small[0].At > big[1].At || small[len(small)-1].At < big[len(big)-2].At {
		t.Errorf("small events from %s to %s, big from %s to %s: want them spread over the big window",
			small[0].At, small[len(small)-1].At, big[0].At, big[len(big)-1].At)
	}
	subs := tenantsSubs(ts.BigSubscribers)
	if len(subs) != 4 {
		t.Fatalf("%d subscribers, want 3 big and 1 small", len(subs))
	}
	for i, s := range subs {
		tenant, want := tenantBig, fmt.Sprintf("%s/tenants-big-%04d", tenantBig, i)
		if i == 3 {
			tenant, want = tenantSmall, tenantSmall+"/"+tenantSmallID
		}
		if s.Tenant != tenant || s.stored() != want || s.Fast != (i == 3) || !(&tasks.Subscriber{EventTypes: s.EventTypes}).Matches(tenantsType) {
			t.Errorf("subscriber %d: %+v, stored as %s: want tenant %s, stored as %s, fast only if small, taking %s", i, s, s.stored(), tenant, want, tenantsType)
		}
	}
}

// The small tenant's figures split at the together phase's start: alone
// the events published before it, together those after; the ratio of the
// p99s is judged against 1.2 and the big tenant's drain runs from its
// first publish to its last delivery. A delivery of an event never
// published to its subscriber counts as stray.
func TestTenantsMeasureComparesTheSmallTenantsP99(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	together := t0.Add(10 * time.Second)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// events are published 100ms apart from start (ms after t0), each
	// delivered lats[i] ms after its publish.
	events := func(prefix string, start int, lats ...int) (map[string]time.Time, []Arrival) {
		pub, arr := map[string]time.Time{}, []Arrival{}
		for i, l := range lats {
			id := fmt.Sprintf("%s-%d", prefix, i)
			pub[id] = at(start + 100*i)
			arr = append(arr, Arrival{At: at(start + 100*i + l), ID: id, Status: 200, SigOK: true})
		}
		return pub, arr
	}
	small := func(together ...int) *outcome {
		pub, arr := events("ta", 0, 10, 10, 10, 20)
		pub2, arr2 := events("ts", 10_000, together...)
		maps.Copy(pub, pub2)
		return buildOutcome(pub, append(arr, arr2...), nil)
	}
	subs := tenantsSubs(2)
	pub0, arr0 := events("tb", 10_000, 500, 1000)
	pub1, arr1 := events("tb", 11_000, 1500, 2000)
	big0 := buildOutcome(pub0, arr0, nil)
	big1 := buildOutcome(pub1, append(arr1, Arrival{At: at(12_000), ID: "stray", Status: 200, SigOK: true}), nil) // never published to it
	tn := &Tenants{BigTenant: tenantBig, SmallTenant: tenantSmall, BigSubscribers: 2, BigEvents: 2, SmallEvents: 4, WindowS: 1, Target: tenantsTarget}
	tn.measure(map[string]*outcome{subs[0].ID: big0, subs[1].ID: big1, subs[2].ID: small(10, 10, 10, 23)}, subs, t0, together)
	if tn.Alone.N != 4 || tn.Alone.P99 != 20 || tn.Together.N != 4 || tn.Together.P99 != 23 || math.Abs(tn.RatioP99-1.15) > 1e-9 || !tn.Within {
		t.Fatalf("alone %+v, together %+v, ratio %.3f, within %v: want p99 20ms and 23ms, 1.15, within", tn.Alone, tn.Together, tn.RatioP99, tn.Within)
	}
	// 5 deliveries (the stray one included) from 10.0s to 13.1s.
	if tn.BigDeliveries != 5 || math.Abs(tn.BigDrainS-3.1) > 1e-9 || tn.Big.N != 4 || tn.Big.P99 != 2000 || tn.Stray != 1 {
		t.Fatalf("big: %d deliveries drained in %.3fs, latency %+v, stray %d: want 5 in 3.1s, p99 2000ms of 4, 1 stray", tn.BigDeliveries, tn.BigDrainS, tn.Big, tn.Stray)
	}
	var b strings.Builder
	tn.summary(&b)
	for _, want := range []string{"alone p50 10ms p99 20ms max 20ms", "p99 23ms max 23ms (of 4 events: p99 is the slowest)",
		"1.15× (target ≤ 1.2×: within); each event, ms: alone 10 10 10 20; together 10 10 10 23", "5 deliveries drained in 3.1s", "1 deliveries of events never published"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary:\n%s\nwant %q", b.String(), want)
		}
	}
	// An event not delivered shows as "-" in the list.
	pub0["tb-late"] = at(10_050)
	if got := msList(buildOutcome(pub0, arr0, nil).inOrder(t0, together.Add(time.Hour))); got != "500 - 1000" {
		t.Errorf("big0's events in publish order: %q, want \"500 - 1000\"", got)
	}
	tn.measure(map[string]*outcome{subs[0].ID: big0, subs[1].ID: big1, subs[2].ID: small(10, 10, 10, 25)}, subs, t0, together)
	b.Reset()
	tn.summary(&b)
	if tn.Within || !strings.Contains(b.String(), "1.25× (target ≤ 1.2×: NOT within)") {
		t.Errorf("ratio %.2f, within %v; summary:\n%s\nwant 1.25, NOT within", tn.RatioP99, tn.Within, b.String())
	}
}

// TestTenantsSmallRun runs the tenants scenario alone at a small size
// with an in-process worker: every event of both tenants is delivered
// once, to its own tenant's subscribers only, and both phases of the small
// tenant are measured.
func TestTenantsSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test; runs ~10s")
	}
	spec := TenantsSpec{BigSubscribers: 20, BigEvents: 5, SmallEvents: 5, Window: time.Second}
	rep := runLogged(t, 2*time.Minute, Config{Out: t.TempDir(), Scenarios: []string{ScenarioTenants}, Tenants: &spec,
		Timeout: 60 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	checkTenants(t, scenario(t, rep, ScenarioTenants), spec)
}

// checkTenants asserts what every tenants run must show: each tenant's
// events delivered once to its own subscribers, nothing stray, no
// invariant broken or hidden, and the small tenant measured alone and
// together. The ratio itself is a figure, not asserted.
func checkTenants(t *testing.T, r *ScenarioReport, spec TenantsSpec) {
	t.Helper()
	for _, f := range r.Failures {
		t.Errorf("tenants: invariant broken: %s", f)
	}
	for _, h := range r.Hiding {
		t.Errorf("tenants: invalid in a way that could hide a broken invariant: %s", h)
	}
	bigN := spec.BigSubscribers * spec.BigEvents
	if want := bigN + 2*spec.SmallEvents; r.Published != want || r.Delivered != want || r.Lost != 0 || r.Duplicates != 0 {
		t.Errorf("tenants: published %d, delivered %d, lost %d, duplicates %d: want %d each delivered once",
			r.Published, r.Delivered, r.Lost, r.Duplicates, want)
	}
	tn := r.Tenants
	if tn == nil || tn.Alone.N != spec.SmallEvents || tn.Together.N != spec.SmallEvents || tn.RatioP99 <= 0 ||
		tn.BigDeliveries != bigN || tn.Big.N != bigN || tn.BigDrainS <= 0 || tn.Stray != 0 {
		t.Errorf("tenants %+v: want %d small events alone and together, %d big deliveries drained, none stray", tn, spec.SmallEvents, bigN)
	}
}
