package limits_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hooklane/hooklane/limits"
)

func TestReadRateHint(t *testing.T) {
	for _, tt := range []struct {
		name string
		hdr  http.Header
		want limits.RateHint
		ok   bool
	}{
		{"none", http.Header{}, limits.RateHint{Remaining: -1}, false},
		{"structured", http.Header{"Ratelimit": {`"default";r=0;t=5`}, "Ratelimit-Policy": {`"default";q=50;w=1`}},
			limits.RateHint{Remaining: 0, Reset: 5 * time.Second, Quota: 50, Window: time.Second}, true},
		{"two limits: the tighter", http.Header{"Ratelimit": {`"burst";r=3;t=1, "day";r=0;t=3600`},
			"Ratelimit-Policy": {`"burst";q=100;w=60, "day";q=1000;w=86400`}},
			limits.RateHint{Remaining: 0, Reset: time.Hour, Quota: 1000, Window: 86400 * time.Second}, true},
		{"earlier drafts", http.Header{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"2"}, "Ratelimit-Policy": {"10;w=1"}},
			limits.RateHint{Remaining: 0, Reset: 2 * time.Second, Quota: 10, Window: time.Second}, true},
		{"unreadable", http.Header{"Ratelimit": {`"x";r=lots`}, "Ratelimit-Policy": {`"x";q=0;w=1`}}, limits.RateHint{Remaining: -1}, false},
	} {
		got, ok := limits.ReadRateHint(tt.hdr)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	if h, _ := limits.ReadRateHint(http.Header{"Ratelimit-Policy": {`"d";q=50;w=2`}}); h.PerSecond() != 25 || h.Spent() {
		t.Errorf("q=50;w=2: %v/s, spent %v; want 25/s, not spent", h.PerSecond(), h.Spent())
	}
}
