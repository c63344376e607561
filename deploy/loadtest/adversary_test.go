package loadtest

import (
	"strings"
	"testing"
	"time"
)

func TestIdleAdversaryIsReported(t *testing.T) {
	t.Parallel()
	partner := subSpec{ID: "p", Endpoint: Endpoint{Kind: RateEnforcing, Rate: 50, Burst: 10}}
	flaky := subSpec{ID: "f", Endpoint: Endpoint{Kind: Flaky, FailShare: 0.2, ResetShare: 0.05}}
	crm := subSpec{ID: "c", Endpoint: Endpoint{Kind: Fast, DownFor: time.Second}}
	gone := subSpec{ID: "g", Endpoint: Endpoint{Kind: Gone}}
	for _, tc := range []struct {
		name string
		s    subSpec
		sr   SubReport
		want string // "" for none
	}{
		{"partner that throttled", partner, SubReport{Published: 9, Stats: EndpointStats{Throttled: 1, RetryAfterSent: 2, Armed: 1}}, ""},
		{"partner that never throttled", partner, SubReport{Published: 9}, "never answered 429"},
		{"429s without Retry-After", partner, SubReport{Published: 9, Stats: EndpointStats{Throttled: 3}}, "no Retry-After"},
		{"deadline never armed", partner, SubReport{Published: 9, Stats: EndpointStats{Throttled: 1, RetryAfterSent: 1}}, "armed with a ban"},
		{"flaky that did both", flaky, SubReport{Published: 9, Stats: EndpointStats{Resets: 1, Failed: 1}}, ""},
		{"flaky that never reset", flaky, SubReport{Published: 9, Stats: EndpointStats{Failed: 4}}, "never reset"},
		{"flaky that never failed", flaky, SubReport{Published: 9, Stats: EndpointStats{Resets: 4}}, "never answered 5xx"},
		{"outage hit", crm, SubReport{Published: 9, Worker: map[string]int64{"http:error": 3}}, ""},
		{"outage missed", crm, SubReport{Published: 9, Worker: map[string]int64{"http:200": 9}}, "outage was never hit"},
		{"gone", gone, SubReport{Published: 9, Stats: EndpointStats{Gone: 1}}, ""},
		{"gone that never said so", gone, SubReport{Published: 9}, "never answered 410"},
		{"nothing published", gone, SubReport{}, "no events were published"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := idle(tc.s, &tc.sr)
			if tc.want == "" && len(got) > 0 || tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)) {
				t.Fatalf("idle %q, want %q", got, tc.want)
			}
		})
	}
}
