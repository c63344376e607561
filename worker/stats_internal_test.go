package worker

import (
	"maps"
	"strconv"
	"testing"
	"time"
)

// A latency alike from the publish and from the due time is written once
// (the "el" fields) and read in both histograms; one that differs (a
// delivery due after its publish) in each of its own.
func TestLatencyAlikeIsWrittenOnceAndReadInBoth(t *testing.T) {
	c := map[string]int64{}
	countLatency(c, 40*time.Millisecond, 40*time.Millisecond)
	countLatency(c, 300*time.Millisecond, 300*time.Millisecond)
	if want := map[string]int64{"el:0.05": 1, "el:0.5": 1, "el_sum_ms": 340}; !maps.Equal(c, want) {
		t.Fatalf("alike latencies counted as %v, want %v", c, want)
	}
	countLatency(c, 2*time.Second, 70*time.Millisecond) // published, then due 1.93 s later
	raw := map[string]string{"delivered": "3", "http:200": "3", "dead:attempts": "1", "infra_error": "2"}
	for f, n := range c {
		raw[f] = strconv.FormatInt(n, 10)
	}
	want := map[string]int64{"delivered": 3, "http:200": 3, "dead:attempts": 1, "infra_error": 2,
		"e2e:0.05": 1, "e2e:0.5": 1, "e2e:2.5": 1, "e2e_sum_ms": 2340,
		"late:0.05": 1, "late:0.1": 1, "late:0.5": 1, "late_sum_ms": 410}
	if got := ParseCounts(raw); !maps.Equal(got, want) {
		t.Fatalf("ParseCounts(%v) = %v, want %v", raw, got, want)
	}
}
