package worker

import (
	"maps"
	"strconv"
	"testing"
	"time"
)

// A delivery whose latency is alike from the publish and from the due
// time is written once (the "el" fields) and read in both histograms and
// as delivered; one that differs (a delivery due after its publish) as
// delivered and in each histogram of its own. A hash the release before
// wrote beside (delivered, e2e and late for every delivery) adds up.
func TestLatencyAlikeIsWrittenOnceAndReadInBoth(t *testing.T) {
	c := map[string]int64{}
	countDelivered(c, 40*time.Millisecond, 40*time.Millisecond)
	countDelivered(c, 300*time.Millisecond, 300*time.Millisecond)
	if want := map[string]int64{"el:0.05": 1, "el:0.5": 1, "el_sum_ms": 340}; !maps.Equal(c, want) {
		t.Fatalf("alike latencies counted as %v, want %v", c, want)
	}
	countDelivered(c, 2*time.Second, 70*time.Millisecond) // published, then due 1.93 s later
	if want := map[string]int64{"el:0.05": 1, "el:0.5": 1, "el_sum_ms": 340, "delivered": 1,
		"e2e:2.5": 1, "e2e_sum_ms": 2000, "late:0.1": 1, "late_sum_ms": 70}; !maps.Equal(c, want) {
		t.Fatalf("counted as %v, want %v", c, want)
	}
	// the release before's two deliveries of 10 ms, and its other counters
	raw := map[string]string{"delivered": "2", "e2e:0.05": "2", "e2e_sum_ms": "20", "late:0.05": "2", "late_sum_ms": "20",
		"http:200": "5", "dead:attempts": "1", "infra_error": "2"}
	for f, n := range c {
		m, _ := strconv.ParseInt(raw[f], 10, 64)
		raw[f] = strconv.FormatInt(m+n, 10)
	}
	want := map[string]int64{"delivered": 5, "http:200": 5, "dead:attempts": 1, "infra_error": 2,
		"e2e:0.05": 3, "e2e:0.5": 1, "e2e:2.5": 1, "e2e_sum_ms": 2360,
		"late:0.05": 3, "late:0.1": 1, "late:0.5": 1, "late_sum_ms": 430}
	if got := ParseCounts(raw); !maps.Equal(got, want) {
		t.Fatalf("ParseCounts(%v) = %v, want %v", raw, got, want)
	}
}
