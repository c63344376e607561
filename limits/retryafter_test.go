package limits_test

import (
	"testing"
	"time"

	"github.com/hooklane/hooklane/limits"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 7, 11, 8, 14, 2, 0, time.UTC)
	const max = time.Hour
	tests := []struct {
		name, value string
		want        time.Time
		ok          bool
	}{
		{"seconds", "120", now.Add(120 * time.Second), true},
		{"zero seconds", "0", now, true},
		{"padded", " 3 ", now.Add(3 * time.Second), true},
		{"IMF-fixdate", "Sat, 11 Jul 2026 08:16:02 GMT", now.Add(2 * time.Minute), true},
		{"RFC 850", "Saturday, 11-Jul-26 08:16:02 GMT", now.Add(2 * time.Minute), true},
		{"asctime", "Sat Jul 11 08:16:02 2026", now.Add(2 * time.Minute), true},
		{"past date is due now", "Fri, 10 Jul 2026 08:00:00 GMT", now, true},
		{"huge seconds capped", "999999999", now.Add(max), true},
		{"overflowing seconds capped", "99999999999999999999999", now.Add(max), true},
		{"far date capped", "Mon, 11 Jul 2039 08:16:02 GMT", now.Add(max), true},
		{"negative", "-5", time.Time{}, false},
		{"fraction", "1.5", time.Time{}, false},
		{"garbage", "soon", time.Time{}, false},
		{"empty", "", time.Time{}, false},
		{"blank", "   ", time.Time{}, false},
		{"plus sign", "+5", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := limits.ParseRetryAfter(tt.value, now, max)
			if ok != tt.ok || !got.Equal(tt.want) {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "-1", "Sat, 11 Jul 2026 08:16:02 GMT", "Sat Jul 11 08:16:02 2026", "", "9999999999999999999999", "1e3"} {
		f.Add(s)
	}
	now := time.Date(2026, 7, 11, 8, 14, 2, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := limits.ParseRetryAfter(v, now, time.Hour)
		if !ok {
			if !got.IsZero() {
				t.Fatalf("%q: not ok but deadline %v", v, got)
			}
			return
		}
		// Whatever the endpoint says, the deadline is never before the
		// receive time and never past the cap.
		if got.Before(now) || got.After(now.Add(time.Hour)) {
			t.Fatalf("%q: deadline %v outside [now, now+1h]", v, got)
		}
	})
}

func TestCeilSecond(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)
	for _, tt := range []struct{ in, want time.Time }{
		{base, base},
		{base.Add(time.Nanosecond), base.Add(time.Second)},
		{base.Add(999 * time.Millisecond), base.Add(time.Second)},
	} {
		if got := limits.CeilSecond(tt.in); !got.Equal(tt.want) {
			t.Errorf("CeilSecond(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestDeferredDelayNeverEarly(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 5, 300_000_000, time.UTC)
	e := &limits.DeferredError{Until: now.Add(2500 * time.Millisecond)} // 00:00:07.8
	d := e.Delay(now)
	// asynq stores now+d truncated to a second; that must not precede Until.
	if stored := now.Add(d).Truncate(time.Second); stored.Before(e.Until) {
		t.Fatalf("delay %v makes the task due at %v, before %v", d, stored, e.Until)
	}
	if d != 2700*time.Millisecond {
		t.Fatalf("delay = %v, want 2.7s (to 00:00:08)", d)
	}
	if got := (&limits.DeferredError{Until: now.Add(-time.Hour)}).Delay(now); got != 0 {
		t.Fatalf("past Until: delay = %v, want 0", got)
	}
}

func TestBackoffBounds(t *testing.T) {
	for n := range 50 {
		for range 100 {
			d := limits.Backoff(n, time.Second, time.Minute)
			hi := time.Minute
			if n < 6 {
				hi = time.Second << n
			}
			if d < time.Second || d > hi {
				t.Fatalf("Backoff(%d) = %v, want in [1s, %v]", n, d, hi)
			}
		}
	}
}

func TestLimitJSON(t *testing.T) {
	l := limits.Limit{Rate: 10, Burst: 20, Period: time.Minute}
	b, err := l.MarshalJSON()
	if err != nil || string(b) != `{"rate":10,"burst":20,"period":"1m0s"}` {
		t.Fatalf("MarshalJSON = %s, %v", b, err)
	}
	var back limits.Limit
	if err := back.UnmarshalJSON(b); err != nil || back != l {
		t.Fatalf("round trip = %v, %v", back, err)
	}
	if err := back.UnmarshalJSON([]byte(`{"rate":1,"burst":1,"period":"soon"}`)); err == nil {
		t.Fatal("bad period accepted")
	}
}
