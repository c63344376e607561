package limits_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hooklane/hooklane/limits"
)

var testPolicy = limits.BreakerPolicy{Failures: 3, ProbeGap: 200 * time.Millisecond, MaxProbeGap: 500 * time.Millisecond,
	Ramp: 2 * time.Second, DisableAfter: -1}

func (b *bundle) fail(t *testing.T, p limits.BreakerPolicy, probe bool) limits.BreakerChange {
	t.Helper()
	c, _, err := b.g.BreakerFailed(context.Background(), b.k, "g1", p, "request failed: connection reset", probe)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *bundle) field(t *testing.T, f string) string {
	t.Helper()
	return b.rdb.HGet(context.Background(), b.k.Record, f).Val()
}

// untilProbe admits (polling) until the breaker lets the probe out.
func (b *bundle) untilProbe(t *testing.T) limits.Admission {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b.rdb.ZRem(context.Background(), b.k.Waiting, "m")
		if a := b.admit(t, limits.AdmitRequest{Member: "m", Ramp: time.Second}); a.Admitted() {
			return a
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no probe let out within 5s")
	return limits.Admission{}
}

func TestBreakerOpensAfterFailuresInARowAndAnAnswerEndsTheStreak(t *testing.T) {
	b := setup(t)
	b.fail(t, testPolicy, false)
	b.fail(t, testPolicy, false)
	if a := b.admit(t, limits.AdmitRequest{}); !a.Admitted() || !a.Streak {
		t.Fatalf("after 2 failures: %+v; want admitted with the streak on record", a)
	}
	if c, _, err := b.g.BreakerAnswered(context.Background(), b.k, "g1"); err != nil || c != limits.BreakerSame {
		t.Fatalf("an answer while closed: %v %v", c, err)
	}
	if a := b.admit(t, limits.AdmitRequest{}); a.Streak {
		t.Fatal("the streak is still on record after an answer")
	}
	b.fail(t, testPolicy, false)
	if c := b.fail(t, testPolicy, false); c != limits.BreakerSame {
		t.Fatalf("2 failures after an answer: %v; want still closed (not consecutive with the first 2)", c)
	}
	if c := b.fail(t, testPolicy, false); c != limits.BreakerOpened {
		t.Fatalf("3rd failure in a row: %v; want opened", c)
	}
	if c, _, _ := b.g.BreakerFailed(context.Background(), b.k, "other-gen", testPolicy, "x", false); c != limits.BreakerSame {
		t.Fatal("a failure of another generation changed the breaker")
	}
}

func TestOpenBreakerHoldsTasksOnItsCursorAndLetsOneProbeOut(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for range testPolicy.Failures {
		b.fail(t, testPolicy, false)
	}
	a1 := b.admit(t, limits.AdmitRequest{Member: "t1"})
	a2 := b.admit(t, limits.AdmitRequest{Member: "t2"})
	if a1.Held < time.Second-50*time.Millisecond || a1.Admitted() {
		t.Fatalf("first task while open: %+v; want held for at least a second", a1)
	}
	// Each held task takes the next turn on the breaker's cursor, one gap
	// later: they come back one per probe gap, not together.
	if d := a2.Held - a1.Held; d < testPolicy.ProbeGap-50*time.Millisecond || d > testPolicy.ProbeGap+50*time.Millisecond {
		t.Fatalf("second held task wakes %s after the first; want one probe gap (%s)", d, testPolicy.ProbeGap)
	}
	for _, m := range []string{"t1", "t2"} {
		if _, err := b.rdb.ZScore(ctx, b.k.Waiting, m).Result(); err != nil {
			t.Fatalf("held task %s is not in the waiting index: %v", m, err)
		}
	}
	if a, err := b.g.Take(ctx, b.k, "", 100, time.Minute); err != nil || a.Admitted() || a.Held == 0 {
		t.Fatalf("Take while open: %+v %v; want refused (held)", a, err)
	}

	p := b.untilProbe(t)
	if !p.Probe {
		t.Fatalf("first admission after the gap: %+v; want the probe", p)
	}
	if a := b.admit(t, limits.AdmitRequest{Member: "t3"}); a.Admitted() || a.Held == 0 {
		t.Fatalf("with the probe in flight: %+v; want held", a)
	}
	// Each failed probe stretches the gap by ProbeGrowth, up to the cap.
	for _, want := range []int{300, 450, 500, 500} {
		b.fail(t, testPolicy, true)
		if got, _ := strconv.Atoi(b.field(t, "b_gap")); got != want {
			t.Fatalf("gap after a failed probe: %dms, want %dms", got, want)
		}
	}
	p = b.untilProbe(t)
	if c, _, err := b.g.BreakerAnswered(ctx, b.k, "g1"); err != nil || c != limits.BreakerClosed {
		t.Fatalf("the probe's answer: %v %v; want closed", c, err)
	}
	if b.field(t, "b_open") != "" || b.field(t, "b_ramp") == "" {
		t.Fatal("closed breaker: want b_open gone and the slow start begun")
	}
}

func TestSlowStartAfterCloseSendsATenthOfTheRateWithoutBurst(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	lim := limits.Limit{Rate: 100, Burst: 100, Period: time.Second}
	for range testPolicy.Failures {
		b.fail(t, testPolicy, false)
	}
	b.untilProbe(t)
	if c, _, _ := b.g.BreakerAnswered(ctx, b.k, "g1"); c != limits.BreakerClosed {
		t.Fatal("not closed")
	}
	b.rdb.Del(ctx, b.k.Rate) // the probe's own admission
	first := b.admit(t, limits.AdmitRequest{Limit: lim, Ramp: 10 * time.Second})
	second := b.admit(t, limits.AdmitRequest{Limit: lim, Ramp: 10 * time.Second})
	// At 100/s with a burst of 100 both would pass; ramping (10/s, burst 1)
	// the second waits about 100ms.
	if !first.Admitted() || second.Admitted() || second.Wait < 50*time.Millisecond {
		t.Fatalf("slow start: %+v then %+v; want the second refused for ~100ms", first, second)
	}
}

func TestFailingWithoutABreakForDisableAfterDisables(t *testing.T) {
	b := setup(t)
	p := testPolicy
	p.DisableAfter = 300 * time.Millisecond
	b.fail(t, p, false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := b.fail(t, p, false)
		if c == limits.BreakerDisabled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never disabled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := b.field(t, "paused"); got != "failing" {
		t.Fatalf("disabled subscriber's pause reason %q, want failing", got)
	}
	if a := b.admit(t, limits.AdmitRequest{}); a.Paused != "failing" {
		t.Fatalf("admission of a disabled subscriber: %+v; want paused (failing)", a)
	}
}
