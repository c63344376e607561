package tasks_test

import (
	"testing"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// Durations are written as a person would write them.
func TestDurationWords(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{168 * time.Hour, "7 days"},
		{24 * time.Hour, "24 hours"},
		{90 * time.Second, "90 seconds"},
		{90 * time.Minute, "90 minutes"},
		{time.Hour, "1 hour"},
		{time.Second, "1 second"},
		{0, "0 seconds"},
		{36 * time.Hour, "36 hours"},
		{48 * time.Hour, "2 days"},
		{720 * time.Hour, "30 days"},
		{721 * time.Hour, "30 days 1 hour"},
		{60 * time.Hour, "2 days 12 hours"},
		{25*time.Hour + 30*time.Minute, "25 hours 30 minutes"},
		{150 * time.Second, "2 minutes 30 seconds"},
		{2 * time.Minute, "2 minutes"},
		{8760 * time.Hour, "365 days"},
		{500 * time.Millisecond, "500 milliseconds"},
		{1500 * time.Millisecond, "1.5 seconds"},
		{1234 * time.Millisecond, "1.234 seconds"},
		{2*time.Minute + 500*time.Millisecond, "2 minutes 500 milliseconds"},
		{3031 * time.Nanosecond, "3.031µs"},
		{-90 * time.Second, "minus 90 seconds"},
	} {
		if got := tasks.DurationWords(c.d); got != c.want {
			t.Errorf("DurationWords(%v) = %q; want %q", c.d, got, c.want)
		}
	}
}
